package intents

// Replies are the replies the project wrote for each CLINC150 intent the
// in-vehicle assistant handles. The training corpus fills the {slot}
// placeholders with a seeded generator (models/lmtrain/corpus), so the
// model sees varied numbers, places and times rather than one fixed
// sentence per intent.
var Replies = map[string][]string{
	// auto_and_commute
	"current_location": {
		"You are on {street}, about {miles} miles from {city} centre.",
		"Your current position is {street} in {city}.",
		"We are near {street}, heading {heading}.",
	},
	"oil_change_when": {
		"Your next oil change is due in about {kmiles} miles.",
		"Oil life is at {pct} percent. Plan a change within {weeks} weeks.",
		"No oil change needed yet: {kmiles} miles to go.",
	},
	"oil_change_how": {
		"Warm the engine, drain the old oil, replace the filter, then refill with {oil} oil.",
		"Park level, drain the oil pan, fit a new filter and add {quarts} quarts of {oil}.",
	},
	"uber": {
		"A ride is on its way and will arrive in {min} minutes.",
		"I requested a car for you. Pickup in about {min} minutes.",
	},
	"traffic": {
		"Traffic is {traffic} on your route. Expect about {min} minutes.",
		"There is {traffic} traffic ahead, with a delay of {short} minutes.",
		"The roads look {traffic}. Your trip should take {min} minutes.",
	},
	"tire_pressure": {
		"All four tires are at {psi} psi, within the normal range.",
		"The front left tire is low at {lowpsi} psi. The others read {psi} psi.",
		"Tire pressure is fine: {psi} psi all around.",
	},
	"schedule_maintenance": {
		"I booked a service appointment for {day} at {time}.",
		"Your maintenance visit is set for {day} at {time} at the dealer.",
	},
	"gas": {
		"You have about {miles} miles of range left.",
		"The tank is {pct} percent full, about {miles} miles of driving.",
		"Fuel is low: {short} miles left. The nearest station is {near} miles away.",
	},
	"mpg": {
		"This car averages {mpg} miles per gallon.",
		"Your recent trips averaged {mpg} mpg, a bit better on the highway.",
	},
	"distance": {
		"It is {miles} miles away, about {min} minutes of driving.",
		"You are {miles} miles from there. Arrival in roughly {min} minutes.",
	},
	"directions": {
		"Starting route guidance. You will arrive in about {min} minutes.",
		"Route found: {miles} miles via {street}. Turn {turn} in {near} miles.",
		"Navigation started. Head {heading} on {street}.",
	},
	"last_maintenance": {
		"The car was last serviced on {date}.",
		"Your last maintenance was on {date}: oil and filter change.",
	},
	"gas_type": {
		"This car takes {fuel} fuel.",
		"Use {fuel} gasoline for this engine.",
	},
	"tire_change": {
		"Your tires have about {kmiles} miles of tread left.",
		"Replace the tires when the tread is below 2/32 of an inch, in about {kmiles} miles.",
	},
	"jump_start": {
		"Connect red to both positive terminals, black to the good battery and to bare metal, then start the good car first.",
		"Use jumper cables: red to positive, black to ground, run the helper car for {short} minutes, then start yours.",
	},
	// travel
	"plug_type": {
		"{country} uses type {plug} plugs, so bring an adapter.",
		"You will need a type {plug} adapter in {country}.",
	},
	"travel_notification": {
		"I told your bank you will be travelling to {country}.",
		"Your bank now knows about your trip to {country}.",
	},
	"translate": {
		"In {language} that is: {phrase}.",
		"Here is the {language} translation: {phrase}.",
	},
	"flight_status": {
		"Your flight is {flightstatus} and departs at {time} from gate {gate}.",
		"The flight is {flightstatus}. Boarding starts at {time}.",
	},
	"international_visa": {
		"Yes, you need a visa for {country}. Apply at least {weeks} weeks ahead.",
		"No visa is needed for {country} for stays under 90 days.",
	},
	"timezone": {
		"{city} is in the {zone} time zone.",
		"That place uses {zone} time.",
	},
	"exchange_rate": {
		"One dollar is {rate} {currency} today.",
		"The current rate is {rate} {currency} per dollar.",
	},
	"travel_suggestion": {
		"In {city}, try the old town, the museum district and the river walk.",
		"Popular in {city}: the harbour, the food market and the park.",
	},
	"travel_alert": {
		"There are no travel alerts for {country} right now.",
		"There is a level {level} travel advisory for {country}. Check before you go.",
	},
	"vaccines": {
		"For {country}, routine shots are enough. Ask a clinic about hepatitis A.",
		"{country} recommends hepatitis A and typhoid vaccines.",
	},
	"lost_luggage": {
		"Go to the airline's baggage desk and file a report with your tag number.",
		"File a lost baggage report with the airline. Most bags arrive within {short} hours.",
	},
	"book_flight": {
		"I found a flight on {day} at {time} for ${price}. Shall I book it?",
		"There is a direct flight on {day} at {time}, ${price} round trip.",
	},
	"book_hotel": {
		"I found a room in {city} for ${hotel} a night.",
		"A hotel near the centre of {city} has rooms for ${hotel} a night.",
	},
	"carry_on": {
		"One carry-on bag up to 22 by 14 by 9 inches plus one personal item.",
		"You can bring one carry-on and one personal item. Liquids under 3.4 ounces.",
	},
	"car_rental": {
		"I found a rental car for ${hotel} a day. Pickup on {day}.",
		"A compact car is available from {day} for ${hotel} a day.",
	},
	// utility
	"weather": {
		"It is {tempf} degrees and {cond} right now.",
		"Today: {cond}, high of {tempf} degrees.",
		"Expect {cond} weather with {tempf} degrees this afternoon.",
	},
	"alarm": {
		"Alarm set for {time}.",
		"Your alarm will ring at {time}.",
	},
	"date": {
		"Today is {day}, {date}.",
		"It is {day}, {date}.",
	},
	"find_phone": {
		"Your phone is ringing now. It was last seen {place}.",
		"I made your phone ring. It is {place}.",
	},
	"share_location": {
		"I shared your location with {contact}.",
		"{contact} can now see where you are.",
	},
	"timer": {
		"Timer set for {min} minutes.",
		"Done, {min} minute timer started.",
	},
	"make_call": {
		"Calling {contact} now.",
		"Dialing {contact}.",
	},
	"calculator": {
		"The answer is {calc}.",
		"That comes to {calc}.",
	},
	"definition": {
		"That word means a formal statement of meaning. Want an example?",
		"Here is the definition from the dictionary.",
	},
	"measurement_conversion": {
		"Here is the conversion. I will show it on the screen.",
		"I put the converted value on the screen.",
	},
	"flip_coin": {
		"It landed on {coin}.",
		"{coin}!",
	},
	"spelling": {
		"Here is the spelling, letter by letter.",
		"It is spelled as it sounds. I will show it on the screen.",
	},
	"time": {
		"It is {time}.",
		"The time is {time}.",
	},
	"roll_dice": {
		"You rolled a {die}.",
		"The die shows {die}.",
	},
	"text": {
		"What should the message to {contact} say?",
		"Message to {contact} sent.",
	},
	// small_talk
	"who_made_you":          {"I was built by the Phaseless project.", "The Phaseless team made me."},
	"meaning_of_life":       {"Safe trips and good company, I would say.", "Maybe to enjoy the drive."},
	"who_do_you_work_for":   {"I work for you, the driver.", "I am your car's assistant."},
	"do_you_have_pets":      {"No pets, but I like hearing about yours.", "No, I live in your dashboard."},
	"what_are_your_hobbies": {"I like finding good routes and good music.", "Planning trips is my favourite."},
	"fun_fact":              {"Honey never spoils.", "Octopuses have three hearts.", "The first car radio came out in 1930."},
	"what_is_your_name":     {"I am Phaseless, your car assistant.", "You can call me Phaseless."},
	"where_are_you_from":    {"I run right here in your car.", "I live in this car's computer."},
	"goodbye":               {"Goodbye, drive safely!", "See you next trip."},
	"thank_you":             {"You are welcome.", "Happy to help."},
	"greeting":              {"Hello! Where are we going today?", "Hi, how can I help?"},
	"tell_joke":             {"Why did the car get a ticket? It was parked in a no-joking zone.", "What do you call a sleeping car? A snore-o-vehicle."},
	"are_you_a_bot":         {"Yes, I am a small assistant running in your car.", "I am a bot, not a person."},
	"how_old_are_you":       {"I am as old as this software version.", "Young, but I learn quickly."},
	"what_can_i_ask_you":    {"Ask me about navigation, climate, music, weather, time or your car.", "I can help with routes, the car, music, weather and more."},
	// media and volume (home and meta domains)
	"play_music":    {"Playing {genre} music.", "Now playing your {genre} playlist."},
	"next_song":     {"Skipping to the next song.", "Next track."},
	"what_song":     {"This is {song}.", "You are listening to {song}."},
	"change_volume": {"Volume set to {vol}.", "Changing the volume to {vol}."},
}
