package corpus

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/toolprior"
)

// toolTemplates teach the edge model the car tool set (models/cartools):
// requests whose reply is a call, with the arguments copied from the
// request's own words. Each entry is (request templates, tool, argument
// templates in the schema's property order); a value template is a slot
// ("{ctemp}") or a literal, and "#" marks a JSON number or boolean rather
// than a string.
var toolTemplates = []struct {
	asks []string
	tool string
	args [][2]string // property, value template
}{
	{[]string{"set the temperature to {ctemp} degrees", "make it {ctemp} degrees in here", "change the cabin temperature to {ctemp}", "temperature {ctemp} please",
		"can you set the climate to {ctemp} degrees", "i want {ctemp} degrees", "heat the car to {ctemp}", "cool it down to {ctemp} degrees", "set climate {ctemp}",
		"put the temperature at {ctemp}", "{ctemp} degrees please", "adjust the temperature to {ctemp} degrees celsius", "warm the cabin to {ctemp} degrees",
		"raise the temperature to {ctemp}", "lower the temperature to {ctemp} degrees", "i'd prefer {ctemp} degrees", "set it to {ctemp} degrees inside",
		"it's too cold, go to {ctemp} degrees", "it's too warm, make it {ctemp}", "climate {ctemp} degrees", "turn the temperature down to {ctemp}", "turn the temperature up to {ctemp}",
		"can it be {ctemp} degrees", "heat to {ctemp}", "ac to {ctemp} degrees", "set the ac at {ctemp}", "keep the car at {ctemp} degrees", "temp {ctemp}", "degrees to {ctemp}",
		"make the temperature {ctemp}", "set the heater to {ctemp} degrees", "increase the temperature to {ctemp}", "reduce the temperature to {ctemp} degrees"},
		"set_temperature", [][2]string{{"temperature", "#{ctemp}"}}},
	{[]string{"set the fan to {fan}", "fan speed {fan}", "turn the fan to level {fan}", "put the fan on {fan}", "change the fan speed to {fan}", "blower to {fan}",
		"i want the fan at {fan}", "fan level {fan} please", "make the fan speed {fan}", "set the blower to level {fan}",
		"turn the fan up to {fan}", "turn the fan down to {fan}", "fan at {fan}", "the fan on level {fan}", "more air, fan {fan}", "less air, fan {fan}",
		"set the airflow to {fan}", "airflow level {fan}", "ventilation to {fan}", "reduce the fan to {fan}", "can the fan go to {fan}",
		"switch the fan to {fan}", "i'd like the fan on {fan}", "blow the air at level {fan}", "fan speed to level {fan}", "the blower on {fan}"},
		"set_fan_speed", [][2]string{{"level", "#{fan}"}}},
	{[]string{"turn the fan off", "switch off the fan", "stop the fan", "fan off", "no more fan", "shut the fan off", "turn off the blower", "fan to zero", "i don't need the fan"},
		"set_fan_speed", [][2]string{{"level", "#0"}}},
	{[]string{"defrost the windshield", "clear the windshield", "the windows are foggy", "turn on the defroster", "defrost on", "i can't see, the windshield is fogged up",
		"defog the windshield", "the windshield is fogging up", "switch on the defrost", "start the defroster", "clear the fog on the windshield", "demist the front window",
		"turn the defogger on", "windshield defrost please", "it's misty, defrost the glass", "get rid of the fog on the windshield"},
		"set_defrost", [][2]string{{"on", "#true"}}},
	{[]string{"turn off the defroster", "defrost off", "stop defrosting", "switch the defrost off", "defogger off", "that's enough defrosting",
		"turn the defrost off", "no more defrost", "end the defroster"},
		"set_defrost", [][2]string{{"on", "#false"}}},
	{[]string{"open the {window} window", "roll down the {window} window", "lower the {window} window", "crack the {window} window", "put the {window} window down", "open {window} windows",
		"{window} window open", "bring the {window} window down",
		"i need some air, open the {window} window", "let the {window} window down", "wind down the {window} window", "the {window} window should be open",
		"open the window on the {window} side", "drop the {window} window a bit", "slide the {window} window down"},
		"set_window", [][2]string{{"window", "{window}"}, {"action", "open"}}},
	{[]string{"close the {window} window", "roll up the {window} window", "raise the {window} window", "shut the {window} window", "put the {window} window up", "close {window} windows",
		"roll the {window} window up", "{window} window closed", "bring the {window} window up",
		"it's noisy, close the {window} window", "wind up the {window} window", "the {window} window should be closed", "close the window on the {window} side",
		"it's cold, shut the {window} window", "slide the {window} window up"},
		"set_window", [][2]string{{"window", "{window}"}, {"action", "close"}}},
	{[]string{"turn on the {seat} seat heater", "heat the {seat} seat", "warm up the {seat} seat", "{seat} seat heating on", "switch on the {seat} seat heater", "my {seat} seat is cold",
		"the {seat} seat is freezing", "{seat} seat heater on", "heated seat on for the {seat}", "turn the {seat} seat warmer on", "can you heat up the {seat} seat",
		"warm the seat on the {seat} side", "start the {seat} seat heater", "i want the {seat} seat warm"},
		"set_seat_heater", [][2]string{{"seat", "{seat}"}, {"on", "#true"}}},
	{[]string{"turn off the {seat} seat heater", "stop heating the {seat} seat", "{seat} seat heating off", "switch off the {seat} seat heater",
		"the {seat} seat is too warm", "no more heat on the {seat} seat", "turn the {seat} seat warmer off", "the {seat} seat is hot enough, stop heating it",
		"seat heat off, {seat}", "cancel the {seat} seat heater"},
		"set_seat_heater", [][2]string{{"seat", "{seat}"}, {"on", "#false"}}},
	{[]string{"navigate to {dest}", "take me to {dest}", "drive to {dest}", "find a route to {dest}", "get directions to {dest}", "how do i get to {dest}",
		"start navigation to {dest}", "go to {dest}", "route me to {dest}", "i need to get to {dest}", "let's go to {dest}", "set the destination to {dest}", "directions to {dest} please",
		"i'm going to {dest}", "we're going to {dest}", "bring us to {dest}", "lead me to {dest}", "find the way to {dest}", "give me a route to {dest}",
		"what's the fastest way to {dest}", "start a route to {dest}", "i want to go to {dest}", "head to {dest}", "can you get me to {dest}", "destination {dest}",
		"new destination, {dest}", "set course for {dest}", "map a route to {dest}", "guide us to {dest}", "i need directions to {dest}",
		"take the car to {dest}", "{dest}, navigate there", "we need to be at {dest}", "drive us to {dest} please", "directions to {dest}", "route to {dest}"},
		"navigate_to", [][2]string{{"destination", "{dest}"}}},
	{[]string{"play some {music}", "put on {music}", "i want to hear {music}", "play {music}", "can you play {music}", "listen to {music}", "start playing {music}", "play me some {music} please",
		"i'd like to listen to {music}", "let's listen to {music}", "turn on {music}", "play a bit of {music}", "how about some {music}",
		"some {music} please", "music, {music}", "give me some {music}", "can we have {music}", "switch to {music}", "let's have some {music}",
		"play songs by {music}", "play something from {music}", "put on some music by {music}", "play the album by {music}"},
		"play_media", [][2]string{{"query", "{music}"}}},
	{[]string{"pause the music", "pause", "stop the music", "hold the song", "pause playback", "pause this", "hold on, pause", "pause the radio", "freeze the music", "stop playing",
		"pause the podcast", "mute the song for now, pause it"},
		"media_control", [][2]string{{"action", "pause"}}},
	{[]string{"resume the music", "resume", "continue playing", "unpause", "keep playing the song", "resume playback", "play it again from where it stopped", "continue the song", "unpause the music",
		"back on with the music, resume", "carry on playing", "resume the podcast"},
		"media_control", [][2]string{{"action", "resume"}}},
	{[]string{"next song", "skip this song", "skip", "play the next track", "next track please", "skip ahead", "skip this one", "next", "change the song", "skip the track",
		"i don't like this one, skip it", "move to the next song", "go to the next track", "forward one song"},
		"media_control", [][2]string{{"action", "next"}}},
	{[]string{"previous song", "go back a song", "play the last track again", "previous track", "back one song", "play the previous song", "go back to the last song",
		"replay the last song", "one track back", "the song before this one"},
		"media_control", [][2]string{{"action", "previous"}}},
	{[]string{"set the volume to {vol}", "volume {vol}", "change the volume to {vol}", "turn the volume to {vol}", "make the volume {vol}", "put the volume at {vol}", "volume level {vol} please",
		"volume at {vol}", "turn it up to {vol}", "turn the volume down to {vol}", "lower the volume to {vol}", "raise the volume to {vol}",
		"sound level {vol}", "audio to {vol}", "make it louder, {vol}", "make it quieter, {vol}", "volume should be {vol}", "can the volume be {vol}",
		"put the sound on {vol}", "volume down to {vol}", "volume up to {vol}", "music louder to {vol}"},
		"set_volume", [][2]string{{"level", "#{vol}"}}},
	{[]string{"set a timer for {tmin} minutes", "make a {tmin} minute timer", "timer {tmin} minutes", "start a {tmin} minute timer", "remind me in {tmin} minutes",
		"countdown {tmin} minutes", "set the timer to {tmin} minutes", "i need a timer for {tmin} minutes", "{tmin} minute timer please", "start a timer of {tmin} minutes",
		"a {tmin} minute timer", "count down {tmin} minutes", "alert me after {tmin} minutes", "put a timer on for {tmin} minutes", "time {tmin} minutes",
		"start counting down from {tmin} minutes", "let me know in {tmin} minutes", "can you set a {tmin} minute timer", "{tmin} minutes on the timer", "give me {tmin} minutes on a timer",
		"timer, {tmin} minutes", "set an alarm in {tmin} minutes", "ping me in {tmin} minutes", "parking timer {tmin} minutes", "start the clock for {tmin} minutes", "a timer of {tmin} min"},
		"set_timer", [][2]string{{"minutes", "#{tmin}"}}},
	{[]string{"call {contact}", "phone {contact}", "dial {contact}", "give {contact} a call", "ring {contact}", "make a call to {contact}", "can you call {contact}", "i want to call {contact}", "get {contact} on the phone",
		"start a call with {contact}", "i need to call {contact}", "connect me with {contact}", "call up {contact}", "phone call to {contact}",
		"let me talk to {contact}", "put me through to {contact}", "can i speak to {contact}", "{contact}, call them", "calling {contact}", "try {contact} on the phone",
		"i'd like to phone {contact}", "call {contact} for me", "reach {contact} by phone", "dial up {contact}"},
		"call_contact", [][2]string{{"name", "{contact}"}}},
	{[]string{"how much fuel do i have", "check the fuel level", "what's my fuel level", "how much gas is left", "is the tank full", "do i need gas", "fuel status", "am i running out of fuel",
		"how full is the tank", "do we have enough fuel", "gas level", "how much fuel is in the tank", "should i fill up", "is the fuel low"},
		"get_vehicle_status", [][2]string{{"item", "fuel"}}},
	{[]string{"how much battery is left", "check the battery", "what's the battery level", "battery status", "is the battery charged", "how charged is the battery", "battery level please",
		"do i need to charge", "what's my charge", "state of charge", "is the battery low"},
		"get_vehicle_status", [][2]string{{"item", "battery"}}},
	{[]string{"what's my range", "how far can i drive", "how many miles can i go", "check the range", "range left", "how far will the car go", "what's the remaining range", "distance to empty",
		"how many miles do i have left", "can i make it another hundred miles", "range status"},
		"get_vehicle_status", [][2]string{{"item", "range"}}},
	{[]string{"check the tire pressure", "what's my tire pressure", "are my tires ok", "tire pressure status", "are the tires inflated", "do my tires need air", "tire check", "how are the tires",
		"is a tire low", "check the tires"},
		"get_vehicle_status", [][2]string{{"item", "tire_pressure"}}},
	{[]string{"check the oil", "how is the oil", "oil status", "what's the oil level", "oil level please", "does the engine need oil", "check the engine oil", "how's my oil"},
		"get_vehicle_status", [][2]string{{"item", "oil"}}},
	{[]string{"are the doors locked", "check the doors", "door status", "is any door open", "are all the doors closed", "is a door open", "did i lock the doors", "doors ok",
		"check if the doors are shut"},
		"get_vehicle_status", [][2]string{{"item", "doors"}}},
	{[]string{"lock the doors", "lock the car", "lock up", "lock all doors", "please lock the doors", "lock it", "secure the car", "doors locked please", "lock the doors now", "engage the locks",
		"lock every door", "can you lock the car"},
		"lock_doors", [][2]string{{"locked", "#true"}}},
	{[]string{"unlock the doors", "unlock the car", "open the locks", "unlock all doors", "unlock", "unlock it", "release the locks", "doors unlocked please",
		"unlock every door", "can you unlock the car", "disengage the locks"},
		"lock_doors", [][2]string{{"locked", "#false"}}},
}

// toolLead and toolTail are what drivers put around a request ("hey car,
// …", "… please"): a request is wrapped in one of each (mostly the empty
// one), so the model learns the request's words, not its first word.
var (
	toolLead = []string{"", "", "", "", "", "", "hey car, ", "ok ", "okay, ", "hey, ", "um, ", "so ", "car, ", "alright, ", "quick one, ", "hi, "}
	toolTail = []string{"", "", "", "", "", "", " thanks", " when you can", " quickly", " thank you", ", thanks", " right now", " if you can", " asap", " real quick"}
)

// toolSlots are the fillers of the tool templates: wide lists so the model
// learns to copy a value from the request rather than to recall a list.
var toolSlots = map[string][]string{
	"window": {"driver", "passenger", "rear left", "rear right", "all"},
	"seat":   {"driver", "passenger", "rear"},
	"dest": {"Boston", "Denver", "Seattle", "Austin", "Chicago", "Miami", "Portland", "Phoenix", "Madrid", "Tokyo", "Paris", "Berlin",
		"Dallas", "Atlanta", "Toronto", "Detroit", "Houston", "Nashville", "San Diego", "Las Vegas", "New York", "Salt Lake City", "Oakland", "Reno",
		"Main Street", "Oak Avenue", "Highway 101", "Park Road", "5th Street", "Lake Drive", "Market Street", "Route 9", "Elm Street", "Pine Road",
		"Sunset Boulevard", "River Road", "Maple Avenue", "2nd Avenue", "the airport", "the train station", "the nearest gas station", "a charging station",
		"the office", "home", "the mall", "the hospital", "a coffee shop", "the beach", "the stadium", "the library", "the hotel", "the pharmacy",
		"Baltimore", "Cleveland", "Memphis", "Tucson", "Omaha", "Fresno", "Albany", "Buffalo", "Richmond", "Savannah", "Boise", "Spokane", "Tampa", "Raleigh",
		"Milwaukee", "Kansas City", "Santa Fe", "Los Angeles", "El Paso", "St. Louis", "New Orleans", "Little Rock", "Vancouver", "Montreal", "London", "Rome",
		"Lisbon", "Vienna", "Prague", "Dublin", "Oslo", "Munich", "Hamburg", "Lyon", "Milan", "Zurich", "Kyoto", "Osaka", "Sydney",
		"Broadway", "Cedar Lane", "Hill Street", "Church Road", "Mill Road", "Washington Avenue", "Lincoln Street", "Ocean Drive", "Bay Street", "King Street",
		"Airport Road", "3rd Street", "10th Avenue", "Interstate 5", "Route 66", "the city centre", "downtown", "the zoo", "the museum", "the park", "the school",
		"the supermarket", "a parking garage", "the nearest charger", "the closest restaurant", "work", "the gym", "the bank", "the post office", "the ferry terminal",
		"the bus station", "grandma's house", "the dentist", "the nearest rest stop", "a car wash", "the university", "the harbour", "the market", "the campsite"},
	"music": {"jazz", "rock", "classical music", "pop", "hip hop", "country", "blues", "reggae", "metal", "the news", "a podcast", "my playlist",
		"the Beatles", "Taylor Swift", "Miles Davis", "Queen", "Adele", "Bach", "Drake", "Coldplay", "Nirvana", "Beyonce", "Bob Marley", "Mozart",
		"Radiohead", "ABBA", "Elvis", "Shakira", "jazz radio", "road trip songs", "lofi beats", "90s hits", "Fleetwood Mac", "Daft Punk",
		"soul", "funk", "disco", "techno", "house music", "folk", "punk", "opera", "salsa", "gospel", "indie rock", "k-pop", "bluegrass", "ambient music",
		"the radio", "talk radio", "an audiobook", "my favorites", "my workout mix", "relaxing music", "chill music", "the top hits", "80s music", "christmas songs",
		"Bruce Springsteen", "Billie Eilish", "Ed Sheeran", "Bon Jovi", "Metallica", "Dolly Parton", "Johnny Cash", "Stevie Wonder", "Aretha Franklin", "U2",
		"Pink Floyd", "Led Zeppelin", "the Eagles", "Madonna", "Rihanna", "Eminem", "Kendrick Lamar", "Norah Jones", "Chopin", "Beethoven", "Vivaldi",
		"David Bowie", "the Killers", "Arctic Monkeys", "Lady Gaga", "Bruno Mars", "Frank Sinatra", "Louis Armstrong", "Willie Nelson", "Green Day"},
	"contact": {"mom", "dad", "Alice", "Bob", "John", "Maria", "Sarah", "David", "grandma", "the office", "Emma", "Liam", "Olivia", "Noah",
		"Sophia", "James", "Lucas", "Mia", "Ethan", "Chloe", "Kevin", "Laura", "Peter", "Nina", "John Smith", "Anna Lee", "my wife", "my husband",
		"Carlos", "Yuki", "Priya", "Ahmed", "Fatima", "Tom", "Jessica", "Dr. Brown",
		"grandpa", "my sister", "my boss", "my son", "my daughter", "my mother", "my father", "the school", "the garage", "the doctor", "roadside assistance",
		"Daniel", "Hannah", "Robert", "Linda", "Mark", "Karen", "Paul", "Lisa", "George", "Amy", "Brian", "Megan", "Jason", "Nicole", "Eric", "Julia",
		"Sam", "Alex", "Chris", "Pat", "Jordan", "Taylor", "Wei", "Mohammed", "Sofia", "Diego", "Lena", "Omar", "Ivan", "Elena", "Kenji", "Aisha",
		"Mike Johnson", "Jane Doe", "Tim Cook", "Mary Ann", "uncle Joe", "aunt Sue", "the babysitter", "the plumber", "work", "home"},
}

// toolNumbers draw integers in [lo, hi] for the tool templates.
var toolNumbers = map[string][2]int{"ctemp": {16, 30}, "fan": {1, 5}, "vol": {0, 30}, "tmin": {1, 120}}

func (f *filler) toolValue(name string) string {
	if v, ok := f.vals[name]; ok {
		return v
	}
	var v string
	if r, ok := toolNumbers[name]; ok {
		v = strconv.Itoa(r[0] + f.rng.IntN(r[1]-r[0]+1))
	} else {
		vs := toolSlots[name]
		if vs == nil {
			panic("corpus: no values for tool slot " + name)
		}
		v = vs[f.rng.IntN(len(vs))]
	}
	f.vals[name] = v
	return v
}

func (f *filler) toolFill(tmpl string) string {
	return slotRE.ReplaceAllStringFunc(tmpl, func(m string) string { return f.toolValue(m[1 : len(m)-1]) })
}

// toolArgs renders the arguments object in property order.
func (f *filler) toolArgs(args [][2]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(a[0])
		b.Write(k)
		b.WriteByte(':')
		if lit, ok := strings.CutPrefix(a[1], "#"); ok {
			b.WriteString(f.toolFill(lit))
		} else {
			v, _ := json.Marshal(f.toolFill(a[1]))
			b.Write(v)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// toolOverlap are the CLINC150 intents whose requests are tool calls when
// tools are offered; their prose replies are trained only without tools, as
// their utterances carry no argument values the corpus can copy.
var toolOverlap = map[string]bool{"timer": true, "change_volume": true, "play_music": true, "next_song": true, "make_call": true,
	"directions": true, "gas": true, "tire_pressure": true, "mpg": true}

// toolCopies is how many examples each tool template group contributes.
const toolCopies = 160

// smallTalk are the CLINC150 intents of conversation with the assistant
// itself, which stay prose when tools are offered.
var smallTalk = map[string]bool{"who_made_you": true, "meaning_of_life": true, "who_do_you_work_for": true, "do_you_have_pets": true,
	"what_are_your_hobbies": true, "fun_fact": true, "what_is_your_name": true, "where_are_you_from": true, "goodbye": true, "thank_you": true,
	"greeting": true, "tell_joke": true, "are_you_a_bot": true, "how_old_are_you": true, "what_can_i_ask_you": true}

// wrapRequest puts one of toolLead before a request and one of toolTail
// after it, and capitalises a fifth of them, as people type and speak.
func wrapRequest(rng *rand.Rand, req string) string {
	req = toolLead[rng.IntN(len(toolLead))] + req + toolTail[rng.IntN(len(toolTail))]
	if rng.IntN(5) == 0 {
		req = strings.ToUpper(req[:1]) + req[1:]
	}
	return req
}

// EdgeWithTools is the edge model's corpus with tool calling: Edge's
// examples unchanged, plus tool-call examples (a system turn of
// chatfmt.ToolsSystemPrompt, a car request, a call with the request's values as
// arguments; a fifth of the distinct prompts held out), plus small talk and
// the in-car questions no tool answers (weather, time, arrival) under the
// same system turn with their prose replies, so offering tools does not
// turn every reply into a call.
func EdgeWithTools(seed uint64) (Split, error) {
	s, err := Edge(seed)
	if err != nil {
		return Split{}, err
	}
	rng := rand.New(rand.NewPCG(seed, 4))
	seenTest := map[string]bool{}
	var train, test []Example
	for gi, t := range toolTemplates {
		for range toolCopies {
			fl := newFiller(rng)
			e := Example{System: chatfmt.ToolsSystemPrompt, Prompt: wrapRequest(rng, fl.toolFill(t.asks[rng.IntN(len(t.asks))])),
				Answer: chatfmt.FormatToolCall(t.tool, fl.toolArgs(t.args)), Intent: fmt.Sprintf("tool-%d", gi)}
			if held(e.Prompt, seed) || seenTest[e.Prompt] {
				seenTest[e.Prompt] = true
				test = append(test, e)
			} else {
				train = append(train, e)
			}
		}
	}
	train = slices.DeleteFunc(train, func(e Example) bool { return seenTest[e.Prompt] })
	// Prose under the tools turn: every other small-talk example of Edge
	// and every sixth of its other non-tool requests (flights, weather,
	// definitions), fewer than before: each prose example under the tools
	// turn also teaches that a request the model does not know is prose,
	// and car commands in unseen words went to prose.
	for _, set := range []*[]Example{&s.Train, &s.Test} {
		var add []Example
		for i, e := range *set {
			every := 12
			if smallTalk[e.Intent] {
				every = 2
			}
			if i%every != 0 || toolOverlap[e.Intent] || proseIsTool(e.Intent) {
				continue
			}
			e.System = chatfmt.ToolsSystemPrompt
			add = append(add, e)
		}
		if set == &s.Train {
			train = append(train, add...)
		} else {
			test = append(test, add...)
		}
	}
	s.Train = append(s.Train, train...)
	s.Test = append(s.Test, test...)
	shuffle(rng, s.Train)
	return s, nil
}

// EdgeToolsTune is the fine-tuning corpus of the tools stage: EdgeWithTools
// with the plain (no tools turn) CLINC150 examples thinned to a third, a
// replay that keeps the model's prose while the tool examples make up
// about half of what it reads. The plain in-car requests stay in full:
// they are the same requests as the calls without the tools turn, and
// thinned, the model wrote calls when no tools were offered. The held-out
// part is EdgeWithTools's.
func EdgeToolsTune(seed uint64) (Split, error) {
	s, err := EdgeWithTools(seed)
	if err != nil {
		return Split{}, err
	}
	keep := s.Train[:0]
	plain := 0
	for _, e := range s.Train {
		if e.System == "" && !strings.HasPrefix(e.Intent, "incar-") {
			plain++
			if plain%3 != 0 {
				continue
			}
		}
		keep = append(keep, e)
	}
	s.Train = keep
	return s, nil
}

// proseIsTool reports whether an in-car prose group ("incar-N") is one a
// tool answers when tools are offered (so it is not trained as prose under
// the tools turn).
func proseIsTool(intent string) bool {
	gi, ok := strings.CutPrefix(intent, "incar-")
	if !ok {
		return false
	}
	n, _ := strconv.Atoi(gi)
	// The in-car groups no tool answers: finding a place, arrival time,
	// route preferences, weather, time, forecast, headlights.
	switch n {
	case 8, 9, 10, 16, 18, 19, 20:
		return false
	}
	return true
}

// toolAskPatterns are the tool templates' requests as regular expressions,
// slots as wildcards, with any lead and tail wrapRequest adds, in any case.
var toolAskPatterns = func() []*regexp.Regexp {
	var out []*regexp.Regexp
	for _, t := range toolTemplates {
		for _, a := range t.asks {
			q := regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllStringFunc(regexp.QuoteMeta(a), func(slot string) string {
				if _, ok := toolNumbers[slot[2:len(slot)-2]]; ok {
					return `[0-9]+`
				}
				return `.+`
			})
			out = append(out, regexp.MustCompile("(?i)^"+wrapAlt(toolLead)+q+wrapAlt(toolTail)+"$"))
		}
	}
	return out
}()

// wrapAlt is a regular expression matching any of ws (one of which is "").
func wrapAlt(ws []string) string {
	var q []string
	for _, w := range ws {
		if w != "" {
			q = append(q, regexp.QuoteMeta(w))
		}
	}
	return "(?:" + strings.Join(q, "|") + ")?"
}

// FromToolTemplate reports whether request is one of the tool templates'
// wordings with any slot values, lead and tail: an evaluation set written
// fresh must contain none.
func FromToolTemplate(request string) bool {
	for _, re := range toolAskPatterns {
		if re.MatchString(strings.TrimSpace(request)) {
			return true
		}
	}
	return false
}

// ToolPriorExamples are the tool prior's training examples (models/toolprior)
// from a split's training part: every request under the tools turn,
// labelled with the tool its answer calls and the arguments its template
// fixes (a boolean, an action: not the values copied from the request),
// or Prose for a prose answer.
func ToolPriorExamples(s Split) []toolprior.Example {
	var out []toolprior.Example
	for _, e := range s.Train {
		if e.System != chatfmt.ToolsSystemPrompt {
			continue
		}
		label := toolprior.Prose
		if gi, ok := strings.CutPrefix(e.Intent, "tool-"); ok {
			n, _ := strconv.Atoi(gi)
			t := toolTemplates[n]
			fixed := map[string]json.RawMessage{}
			for _, a := range t.args {
				if v := a[1]; !strings.Contains(v, "{") {
					if lit, ok := strings.CutPrefix(v, "#"); ok {
						fixed[a[0]] = json.RawMessage(lit)
					} else {
						fixed[a[0]], _ = json.Marshal(v)
					}
				}
			}
			label = toolprior.Label(t.tool, fixed)
		}
		out = append(out, toolprior.Example{Text: e.Prompt, Label: label})
	}
	return out
}

// ToolSpanExamples are the tool prior's span examples: each string argument
// a tool-call example of the split's training part copies from its request
// (a place, music, a name, a window), with that request.
func ToolSpanExamples(s Split) []toolprior.SpanExample {
	var out []toolprior.SpanExample
	for _, e := range s.Train {
		gi, ok := strings.CutPrefix(e.Intent, "tool-")
		if !ok || e.System != chatfmt.ToolsSystemPrompt {
			continue
		}
		n, _ := strconv.Atoi(gi)
		t := toolTemplates[n]
		var call struct {
			Arguments map[string]any `json:"arguments"`
		}
		body := strings.TrimSuffix(strings.TrimPrefix(e.Answer, chatfmt.ToolCallOpen), chatfmt.ToolCallClose)
		if json.Unmarshal([]byte(body), &call) != nil {
			continue
		}
		for _, a := range t.args {
			if v, ok := call.Arguments[a[0]].(string); ok && strings.HasPrefix(a[1], "{") {
				out = append(out, toolprior.SpanExample{Text: e.Prompt, Key: a[0], Value: v})
			}
		}
	}
	return out
}
