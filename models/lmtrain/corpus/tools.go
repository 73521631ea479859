package corpus

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/phaseless/phaseless/models/lm"
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
		"put the temperature at {ctemp}", "{ctemp} degrees please", "adjust the temperature to {ctemp} degrees celsius", "warm the cabin to {ctemp} degrees"},
		"set_temperature", [][2]string{{"temperature", "#{ctemp}"}}},
	{[]string{"set the fan to {fan}", "fan speed {fan}", "turn the fan to level {fan}", "put the fan on {fan}", "change the fan speed to {fan}", "blower to {fan}",
		"i want the fan at {fan}", "fan level {fan} please", "make the fan speed {fan}", "set the blower to level {fan}"},
		"set_fan_speed", [][2]string{{"level", "#{fan}"}}},
	{[]string{"turn the fan off", "switch off the fan", "stop the fan", "fan off"},
		"set_fan_speed", [][2]string{{"level", "#0"}}},
	{[]string{"defrost the windshield", "clear the windshield", "the windows are foggy", "turn on the defroster", "defrost on", "i can't see, the windshield is fogged up"},
		"set_defrost", [][2]string{{"on", "#true"}}},
	{[]string{"turn off the defroster", "defrost off", "stop defrosting", "switch the defrost off"},
		"set_defrost", [][2]string{{"on", "#false"}}},
	{[]string{"open the {window} window", "roll down the {window} window", "lower the {window} window", "crack the {window} window", "put the {window} window down", "open {window} windows"},
		"set_window", [][2]string{{"window", "{window}"}, {"action", "open"}}},
	{[]string{"close the {window} window", "roll up the {window} window", "raise the {window} window", "shut the {window} window", "put the {window} window up", "close {window} windows"},
		"set_window", [][2]string{{"window", "{window}"}, {"action", "close"}}},
	{[]string{"turn on the {seat} seat heater", "heat the {seat} seat", "warm up the {seat} seat", "{seat} seat heating on", "switch on the {seat} seat heater", "my {seat} seat is cold"},
		"set_seat_heater", [][2]string{{"seat", "{seat}"}, {"on", "#true"}}},
	{[]string{"turn off the {seat} seat heater", "stop heating the {seat} seat", "{seat} seat heating off", "switch off the {seat} seat heater"},
		"set_seat_heater", [][2]string{{"seat", "{seat}"}, {"on", "#false"}}},
	{[]string{"navigate to {dest}", "take me to {dest}", "drive to {dest}", "find a route to {dest}", "get directions to {dest}", "how do i get to {dest}",
		"start navigation to {dest}", "go to {dest}", "route me to {dest}", "i need to get to {dest}", "let's go to {dest}", "set the destination to {dest}", "directions to {dest} please"},
		"navigate_to", [][2]string{{"destination", "{dest}"}}},
	{[]string{"play some {music}", "put on {music}", "i want to hear {music}", "play {music}", "can you play {music}", "listen to {music}", "start playing {music}", "play me some {music} please"},
		"play_media", [][2]string{{"query", "{music}"}}},
	{[]string{"pause the music", "pause", "stop the music", "hold the song", "pause playback"},
		"media_control", [][2]string{{"action", "pause"}}},
	{[]string{"resume the music", "resume", "continue playing", "unpause", "keep playing the song"},
		"media_control", [][2]string{{"action", "resume"}}},
	{[]string{"next song", "skip this song", "skip", "play the next track", "next track please", "skip ahead"},
		"media_control", [][2]string{{"action", "next"}}},
	{[]string{"previous song", "go back a song", "play the last track again", "previous track", "back one song"},
		"media_control", [][2]string{{"action", "previous"}}},
	{[]string{"set the volume to {vol}", "volume {vol}", "change the volume to {vol}", "turn the volume to {vol}", "make the volume {vol}", "put the volume at {vol}", "volume level {vol} please"},
		"set_volume", [][2]string{{"level", "#{vol}"}}},
	{[]string{"set a timer for {tmin} minutes", "make a {tmin} minute timer", "timer {tmin} minutes", "start a {tmin} minute timer", "remind me in {tmin} minutes",
		"countdown {tmin} minutes", "set the timer to {tmin} minutes", "i need a timer for {tmin} minutes", "{tmin} minute timer please", "start a timer of {tmin} minutes"},
		"set_timer", [][2]string{{"minutes", "#{tmin}"}}},
	{[]string{"call {contact}", "phone {contact}", "dial {contact}", "give {contact} a call", "ring {contact}", "make a call to {contact}", "can you call {contact}", "i want to call {contact}", "get {contact} on the phone"},
		"call_contact", [][2]string{{"name", "{contact}"}}},
	{[]string{"how much fuel do i have", "check the fuel level", "what's my fuel level", "how much gas is left", "is the tank full"},
		"get_vehicle_status", [][2]string{{"item", "fuel"}}},
	{[]string{"how much battery is left", "check the battery", "what's the battery level", "battery status"},
		"get_vehicle_status", [][2]string{{"item", "battery"}}},
	{[]string{"what's my range", "how far can i drive", "how many miles can i go", "check the range"},
		"get_vehicle_status", [][2]string{{"item", "range"}}},
	{[]string{"check the tire pressure", "what's my tire pressure", "are my tires ok", "tire pressure status"},
		"get_vehicle_status", [][2]string{{"item", "tire_pressure"}}},
	{[]string{"check the oil", "how is the oil", "oil status", "what's the oil level"},
		"get_vehicle_status", [][2]string{{"item", "oil"}}},
	{[]string{"are the doors locked", "check the doors", "door status", "is any door open"},
		"get_vehicle_status", [][2]string{{"item", "doors"}}},
	{[]string{"lock the doors", "lock the car", "lock up", "lock all doors", "please lock the doors"},
		"lock_doors", [][2]string{{"locked", "#true"}}},
	{[]string{"unlock the doors", "unlock the car", "open the locks", "unlock all doors"},
		"lock_doors", [][2]string{{"locked", "#false"}}},
}

// toolSlots are the fillers of the tool templates: wide lists so the model
// learns to copy a value from the request rather than to recall a list.
var toolSlots = map[string][]string{
	"window": {"driver", "passenger", "rear left", "rear right", "all"},
	"seat":   {"driver", "passenger", "rear"},
	"dest": {"Boston", "Denver", "Seattle", "Austin", "Chicago", "Miami", "Portland", "Phoenix", "Madrid", "Tokyo", "Paris", "Berlin",
		"Dallas", "Atlanta", "Toronto", "Detroit", "Houston", "Nashville", "San Diego", "Las Vegas", "New York", "Salt Lake City", "Oakland", "Reno",
		"Main Street", "Oak Avenue", "Highway 101", "Park Road", "5th Street", "Lake Drive", "Market Street", "Route 9", "Elm Street", "Pine Road",
		"Sunset Boulevard", "River Road", "Maple Avenue", "2nd Avenue", "the airport", "the train station", "the nearest gas station", "a charging station",
		"the office", "home", "the mall", "the hospital", "a coffee shop", "the beach", "the stadium", "the library", "the hotel", "the pharmacy"},
	"music": {"jazz", "rock", "classical music", "pop", "hip hop", "country", "blues", "reggae", "metal", "the news", "a podcast", "my playlist",
		"the Beatles", "Taylor Swift", "Miles Davis", "Queen", "Adele", "Bach", "Drake", "Coldplay", "Nirvana", "Beyonce", "Bob Marley", "Mozart",
		"Radiohead", "ABBA", "Elvis", "Shakira", "jazz radio", "road trip songs", "lofi beats", "90s hits", "Fleetwood Mac", "Daft Punk"},
	"contact": {"mom", "dad", "Alice", "Bob", "John", "Maria", "Sarah", "David", "grandma", "the office", "Emma", "Liam", "Olivia", "Noah",
		"Sophia", "James", "Lucas", "Mia", "Ethan", "Chloe", "Kevin", "Laura", "Peter", "Nina", "John Smith", "Anna Lee", "my wife", "my husband",
		"Carlos", "Yuki", "Priya", "Ahmed", "Fatima", "Tom", "Jessica", "Dr. Brown"},
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
const toolCopies = 90

// EdgeWithTools is the edge model's corpus with tool calling: Edge's
// examples unchanged, plus tool-call examples (a system turn of
// lm.ToolsSystemPrompt, a car request, a call with the request's values as
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
			e := Example{System: lm.ToolsSystemPrompt, Prompt: fl.toolFill(t.asks[rng.IntN(len(t.asks))]),
				Answer: lm.FormatToolCall(t.tool, fl.toolArgs(t.args)), Intent: fmt.Sprintf("tool-%d", gi)}
			if held(e.Prompt, seed) || seenTest[e.Prompt] {
				seenTest[e.Prompt] = true
				test = append(test, e)
			} else {
				train = append(train, e)
			}
		}
	}
	train = slices.DeleteFunc(train, func(e Example) bool { return seenTest[e.Prompt] })
	// Prose under the tools turn: every third non-tool example of Edge.
	for _, set := range []*[]Example{&s.Train, &s.Test} {
		var add []Example
		for i, e := range *set {
			if i%3 != 0 || toolOverlap[e.Intent] || proseIsTool(e.Intent) {
				continue
			}
			e.System = lm.ToolsSystemPrompt
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
// with the plain (no tools turn) edge examples thinned to a third, a replay
// that keeps the model's prose while the tool examples make up about a
// quarter of what it reads. The held-out part is EdgeWithTools's.
func EdgeToolsTune(seed uint64) (Split, error) {
	s, err := EdgeWithTools(seed)
	if err != nil {
		return Split{}, err
	}
	keep := s.Train[:0]
	plain := 0
	for _, e := range s.Train {
		if e.System == "" {
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
// slots as wildcards.
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
			out = append(out, regexp.MustCompile("^"+q+"$"))
		}
	}
	return out
}()

// FromToolTemplate reports whether request is one of the tool templates'
// wordings with any slot values: an evaluation set written fresh must
// contain none.
func FromToolTemplate(request string) bool {
	for _, re := range toolAskPatterns {
		if re.MatchString(strings.TrimSpace(request)) {
			return true
		}
	}
	return false
}
