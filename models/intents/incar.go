package intents

// Group is one kind of in-car request: how it is asked and how it is
// answered; any request pairs with any reply. Its intent is InCarIntent of
// its index in InCar.
type Group struct {
	Asks, Replies []string
}

// InCar are project-written requests CLINC150 lacks (climate, media,
// windows, on-route navigation) with replies that echo the request's slots,
// so the model learns to carry a value from question to answer.
var InCar = []Group{
	{[]string{"set the temperature to {temp} degrees", "make it {temp} degrees in here", "change the cabin temperature to {temp}", "temperature {temp} please", "can you set the climate to {temp} degrees"},
		[]string{"Setting the cabin temperature to {temp} degrees.", "Climate set to {temp} degrees."}},
	{[]string{"i'm cold", "it's freezing in here", "turn up the heat", "make it warmer", "can you warm up the car"},
		[]string{"Raising the temperature to {temp} degrees.", "Heating on. Warming the cabin to {temp} degrees."}},
	{[]string{"it's too hot in here", "turn on the ac", "turn on the air conditioning", "cool the car down", "make it cooler"},
		[]string{"Air conditioning on, set to {temp} degrees.", "Cooling the cabin to {temp} degrees."}},
	{[]string{"defrost the windshield", "clear the windshield", "the windows are foggy", "turn on the defroster"},
		[]string{"Front defrost is on.", "Defrosting the windshield now."}},
	{[]string{"turn on my seat heater", "heat the {seat} seat", "warm up the {seat} seat", "turn on the {seat} seat heater"},
		[]string{"Heating the {seat} seat.", "The {seat} seat heater is on."}},
	{[]string{"set the fan to {fan}", "fan speed {fan}", "turn the fan to level {fan}"},
		[]string{"Fan speed set to {fan}.", "Fan at level {fan}."}},
	{[]string{"navigate to {city}", "take me to {city}", "drive to {city}", "find a route to {city}", "get directions to {city}"},
		[]string{"Starting navigation to {city}. About {min} minutes.", "Route to {city} set. You will arrive in {min} minutes."}},
	{[]string{"take me to {street}", "navigate to {street}", "how do i get to {street}"},
		[]string{"Starting navigation to {street}.", "Route to {street} found, {near} miles away."}},
	{[]string{"find a {poi}", "where is the nearest {poi}", "is there a {poi} nearby", "i need a {poi}"},
		[]string{"The nearest {poi} is {near} miles ahead.", "I found a {poi} {near} miles away. Shall I route there?"}},
	{[]string{"how long until we arrive", "what's my eta", "when will we get there", "how much longer"},
		[]string{"We will arrive in about {min} minutes.", "Arrival in {min} minutes."}},
	{[]string{"avoid highways", "take the scenic route", "avoid toll roads"},
		[]string{"Route updated. It adds {short} minutes.", "Done, the new route takes {min} minutes."}},
	{[]string{"play some {genre}", "put on {genre} music", "i want to hear {genre}", "play {genre} radio"},
		[]string{"Playing {genre} music.", "Here is some {genre}."}},
	{[]string{"pause the music", "stop the music", "pause", "mute the radio"},
		[]string{"Music paused.", "Paused."}},
	{[]string{"set the volume to {vol}", "volume {vol}", "change the volume to {vol}"},
		[]string{"Volume set to {vol}.", "Volume is now {vol}."}},
	{[]string{"tune to {station}", "switch the radio to {station}", "play station {station}"},
		[]string{"Tuning to {station} FM.", "Now playing {station} FM."}},
	{[]string{"open the {window} window", "roll down the {window} window", "close the {window} window"},
		[]string{"Moving the {window} window.", "Okay, the {window} window."}},
	{[]string{"turn on the headlights", "lights on", "turn on the lights"},
		[]string{"Headlights on.", "Lights are on."}},
	{[]string{"lock the doors", "lock the car", "are the doors locked"},
		[]string{"All doors are locked.", "Doors locked."}},
	{[]string{"what's the weather in {city}", "weather in {city}", "will it rain in {city} today", "how hot is it in {city}"},
		[]string{"In {city} it is {cond} and {tempf} degrees.", "{city}: {cond}, {tempf} degrees."}},
	{[]string{"what time is it in {city}", "tell me the time in {city}", "current time in {city}"},
		[]string{"It is {time} in {city}.", "In {city} it is {time}."}},
	{[]string{"what's the weather tomorrow", "will it rain tomorrow", "forecast for tomorrow"},
		[]string{"Tomorrow: {cond}, high of {tempf} degrees.", "Expect {cond} weather tomorrow, {tempf} degrees."}},
}
