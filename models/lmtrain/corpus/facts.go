package corpus

import (
	"math/rand/v2"
	"strings"
)

// country is one row of the world-facts table the project wrote for the
// cloud model. Names are ASCII so that a reply can be checked by plain string
// comparison; the model itself reads and writes any UTF-8.
type country struct {
	name, capital, continent, language, currency string
}

// countries are facts chosen to be stable and uncontroversial: no disputed
// capitals, no capital in the middle of a move, no currency about to change.
var countries = []country{
	{"France", "Paris", "Europe", "French", "euro"},
	{"Germany", "Berlin", "Europe", "German", "euro"},
	{"Italy", "Rome", "Europe", "Italian", "euro"},
	{"Spain", "Madrid", "Europe", "Spanish", "euro"},
	{"Portugal", "Lisbon", "Europe", "Portuguese", "euro"},
	{"the Netherlands", "Amsterdam", "Europe", "Dutch", "euro"},
	{"Austria", "Vienna", "Europe", "German", "euro"},
	{"Switzerland", "Bern", "Europe", "German, French and Italian", "Swiss franc"},
	{"Poland", "Warsaw", "Europe", "Polish", "zloty"},
	{"the Czech Republic", "Prague", "Europe", "Czech", "Czech koruna"},
	{"Hungary", "Budapest", "Europe", "Hungarian", "forint"},
	{"Greece", "Athens", "Europe", "Greek", "euro"},
	{"Sweden", "Stockholm", "Europe", "Swedish", "Swedish krona"},
	{"Norway", "Oslo", "Europe", "Norwegian", "Norwegian krone"},
	{"Denmark", "Copenhagen", "Europe", "Danish", "Danish krone"},
	{"Finland", "Helsinki", "Europe", "Finnish and Swedish", "euro"},
	{"Ireland", "Dublin", "Europe", "English and Irish", "euro"},
	{"the United Kingdom", "London", "Europe", "English", "pound sterling"},
	{"Iceland", "Reykjavik", "Europe", "Icelandic", "Icelandic krona"},
	{"Ukraine", "Kyiv", "Europe", "Ukrainian", "hryvnia"},
	{"Romania", "Bucharest", "Europe", "Romanian", "Romanian leu"},
	{"Croatia", "Zagreb", "Europe", "Croatian", "euro"},
	{"Serbia", "Belgrade", "Europe", "Serbian", "Serbian dinar"},
	{"Russia", "Moscow", "Europe and Asia", "Russian", "Russian ruble"},
	{"Turkey", "Ankara", "Europe and Asia", "Turkish", "Turkish lira"},
	{"Egypt", "Cairo", "Africa", "Arabic", "Egyptian pound"},
	{"Nigeria", "Abuja", "Africa", "English", "naira"},
	{"Kenya", "Nairobi", "Africa", "Swahili and English", "Kenyan shilling"},
	{"Ethiopia", "Addis Ababa", "Africa", "Amharic", "birr"},
	{"Morocco", "Rabat", "Africa", "Arabic and Berber", "Moroccan dirham"},
	{"Ghana", "Accra", "Africa", "English", "cedi"},
	{"Algeria", "Algiers", "Africa", "Arabic and Berber", "Algerian dinar"},
	{"Senegal", "Dakar", "Africa", "French", "CFA franc"},
	{"Japan", "Tokyo", "Asia", "Japanese", "yen"},
	{"China", "Beijing", "Asia", "Chinese", "yuan"},
	{"India", "New Delhi", "Asia", "Hindi and English", "Indian rupee"},
	{"South Korea", "Seoul", "Asia", "Korean", "won"},
	{"Thailand", "Bangkok", "Asia", "Thai", "baht"},
	{"Vietnam", "Hanoi", "Asia", "Vietnamese", "dong"},
	{"the Philippines", "Manila", "Asia", "Filipino and English", "Philippine peso"},
	{"Malaysia", "Kuala Lumpur", "Asia", "Malay", "ringgit"},
	{"Pakistan", "Islamabad", "Asia", "Urdu and English", "Pakistani rupee"},
	{"Bangladesh", "Dhaka", "Asia", "Bengali", "taka"},
	{"Nepal", "Kathmandu", "Asia", "Nepali", "Nepalese rupee"},
	{"Iran", "Tehran", "Asia", "Persian", "Iranian rial"},
	{"Iraq", "Baghdad", "Asia", "Arabic and Kurdish", "Iraqi dinar"},
	{"Saudi Arabia", "Riyadh", "Asia", "Arabic", "Saudi riyal"},
	{"Mongolia", "Ulaanbaatar", "Asia", "Mongolian", "tugrik"},
	{"the United States", "Washington, D.C.", "North America", "English", "US dollar"},
	{"Canada", "Ottawa", "North America", "English and French", "Canadian dollar"},
	{"Mexico", "Mexico City", "North America", "Spanish", "Mexican peso"},
	{"Cuba", "Havana", "North America", "Spanish", "Cuban peso"},
	{"Jamaica", "Kingston", "North America", "English", "Jamaican dollar"},
	{"Brazil", "Brasilia", "South America", "Portuguese", "Brazilian real"},
	{"Argentina", "Buenos Aires", "South America", "Spanish", "Argentine peso"},
	{"Chile", "Santiago", "South America", "Spanish", "Chilean peso"},
	{"Peru", "Lima", "South America", "Spanish", "sol"},
	{"Colombia", "Bogota", "South America", "Spanish", "Colombian peso"},
	{"Venezuela", "Caracas", "South America", "Spanish", "bolivar"},
	{"Ecuador", "Quito", "South America", "Spanish", "US dollar"},
	{"Uruguay", "Montevideo", "South America", "Spanish", "Uruguayan peso"},
	{"Australia", "Canberra", "Oceania", "English", "Australian dollar"},
	{"New Zealand", "Wellington", "Oceania", "English and Maori", "New Zealand dollar"},
	{"Fiji", "Suva", "Oceania", "English and Fijian", "Fijian dollar"},
}

// elements are the first twenty chemical elements with their symbols.
var elements = [][2]string{
	{"hydrogen", "H"}, {"helium", "He"}, {"lithium", "Li"}, {"beryllium", "Be"}, {"boron", "B"},
	{"carbon", "C"}, {"nitrogen", "N"}, {"oxygen", "O"}, {"fluorine", "F"}, {"neon", "Ne"},
	{"sodium", "Na"}, {"magnesium", "Mg"}, {"aluminium", "Al"}, {"silicon", "Si"}, {"phosphorus", "P"},
	{"sulfur", "S"}, {"chlorine", "Cl"}, {"argon", "Ar"}, {"potassium", "K"}, {"calcium", "Ca"},
	{"iron", "Fe"}, {"copper", "Cu"}, {"silver", "Ag"}, {"gold", "Au"}, {"zinc", "Zn"},
}

// relation is one kind of question about a fact, in several wordings, with
// the one reply the model learns for it. {x} is the subject, {y} the answer.
type relation struct {
	name    string
	asks    []string
	reply   string
	subject func(i int) (x, y string)
	n       int
}

func countryRel(name string, asks []string, reply string, y func(c country) string) relation {
	return relation{name: name, asks: asks, reply: reply, n: len(countries),
		subject: func(i int) (string, string) { return countries[i].name, y(countries[i]) }}
}

var relations = []relation{
	countryRel("capital", []string{
		"what is the capital of {x}", "what's the capital city of {x}", "capital of {x}?",
		"which city is the capital of {x}", "tell me the capital of {x}", "name the capital of {x}",
		"do you know the capital of {x}",
	}, "{y}.", func(c country) string { return c.capital }),
	relation{name: "capital-of", asks: []string{
		"{x} is the capital of which country", "which country has {x} as its capital",
		"what country is {x} the capital of", "{x} is the capital of what", "where is {x}",
	}, reply: "{Y}.", n: len(countries),
		subject: func(i int) (string, string) { return countries[i].capital, countries[i].name }},
	countryRel("continent", []string{
		"which continent is {x} in", "what continent is {x} on", "on which continent is {x}",
		"where in the world is {x}", "what part of the world is {x} in",
	}, "{y}.", func(c country) string { return c.continent }),
	countryRel("language", []string{
		"what language do they speak in {x}", "what is the official language of {x}",
		"which language is spoken in {x}", "what do people speak in {x}", "language of {x}?",
	}, "{Y}.", func(c country) string { return c.language }),
	countryRel("currency", []string{
		"what currency does {x} use", "what is the currency of {x}", "what money do they use in {x}",
		"which currency is used in {x}", "currency of {x}?",
	}, "The {y}.", func(c country) string { return c.currency }),
	relation{name: "symbol", asks: []string{
		"what is the chemical symbol for {x}", "what's the symbol of {x}", "chemical symbol of {x}?",
		"how do you write {x} in chemistry", "which symbol stands for {x}",
	}, reply: "{y}.", n: len(elements),
		subject: func(i int) (string, string) { return elements[i][0], elements[i][1] }},
}

// fill writes x and y into a template; {X} is x with its first letter upper-cased.
func fillFact(tmpl, x, y string) string {
	return strings.NewReplacer("{x}", x, "{X}", strings.ToUpper(x[:1])+x[1:], "{y}", y, "{Y}", strings.ToUpper(y[:1])+y[1:]).Replace(tmpl)
}

// Facts is the general-knowledge part of the cloud corpus: every wording of
// every question about every fact, a fifth of the (fact, wording) pairs held
// out. Every fact keeps at least one trained wording, so the held-out split
// measures answering a known fact asked in an unseen way — what a small model
// can learn, not knowledge it never saw. Training pairs appear copies times,
// with varied capitalisation and punctuation as users type.
func Facts(seed uint64, copies int) Split {
	rng := rand.New(rand.NewPCG(seed, 4))
	var s Split
	for _, r := range relations {
		for i := range r.n {
			x, y := r.subject(i)
			ans := fillFact(r.reply, x, y)
			intent := "fact-" + r.name + ":" + x + "/" + y
			var train []string
			for _, a := range r.asks {
				q := fillFact(a, x, y)
				if held(q, seed) {
					s.Test = append(s.Test, Example{Prompt: q, Answer: ans, Intent: intent})
				} else {
					train = append(train, q)
				}
			}
			if len(train) == 0 { // keep the fact learnable
				train = append(train, s.Test[len(s.Test)-1].Prompt)
				s.Test = s.Test[:len(s.Test)-1]
			}
			for range copies {
				for _, q := range train {
					s.Train = append(s.Train, Example{Prompt: typed(q, rng), Answer: ans, Intent: intent})
				}
			}
		}
	}
	return s
}

// typed varies a question the way people type it: capitalised or not, with
// or without a question mark.
func typed(q string, rng *rand.Rand) string {
	if rng.IntN(2) == 0 {
		q = strings.ToUpper(q[:1]) + q[1:]
	}
	if !strings.HasSuffix(q, "?") && rng.IntN(2) == 0 {
		q += "?"
	}
	return q
}

// FactAnswer is the answer a fact question expects, from the intent Facts
// gave it ("fact-relation:subject/answer").
func FactAnswer(intent string) (string, bool) {
	i := strings.LastIndexByte(intent, '/')
	if i < 0 || !strings.HasPrefix(intent, "fact-") {
		return "", false
	}
	return intent[i+1:], true
}

// factCount is how many facts Facts asks about.
func factCount() int {
	n := 0
	for _, r := range relations {
		n += r.n
	}
	return n
}
