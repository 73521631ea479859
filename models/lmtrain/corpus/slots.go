package corpus

// slotValues are the fillers for the placeholders of the reply templates
// and the in-car requests (models/intents). Plain ASCII words and numbers
// the model can learn to copy.
var slotValues = map[string][]string{
	"street":       {"Main Street", "Oak Avenue", "Highway 101", "Park Road", "5th Street", "Lake Drive", "Market Street", "Route 9"},
	"city":         {"Boston", "Denver", "Seattle", "Austin", "Chicago", "Miami", "Portland", "Phoenix", "Madrid", "Tokyo", "Paris", "Berlin"},
	"heading":      {"north", "south", "east", "west"},
	"turn":         {"left", "right"},
	"traffic":      {"light", "moderate", "heavy"},
	"oil":          {"5W-30", "0W-20", "5W-20"},
	"fuel":         {"regular 87 octane", "premium 91 octane", "midgrade 89 octane"},
	"day":          {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"},
	"date":         {"March 3", "April 12", "May 21", "June 8", "July 30", "August 14", "September 2", "October 19", "November 25", "December 6"},
	"country":      {"Spain", "Japan", "Germany", "Mexico", "Brazil", "Italy", "Canada", "Thailand", "France", "India"},
	"plug":         {"A", "C", "F", "G", "I"},
	"language":     {"Spanish", "French", "German", "Italian"},
	"phrase":       {"hola, buenos dias", "merci beaucoup", "guten Morgen", "grazie mille", "bonjour"},
	"flightstatus": {"on time", "delayed by 20 minutes", "boarding"},
	"gate":         {"A4", "B12", "C7", "D21", "E3"},
	"zone":         {"Eastern", "Central", "Mountain", "Pacific", "Central European"},
	"currency":     {"euros", "yen", "pesos", "pounds"},
	"cond":         {"sunny", "cloudy", "rainy", "clear", "windy", "foggy", "snowing"},
	"place":        {"under the passenger seat", "in the cup holder", "in your bag", "on the back seat"},
	"contact":      {"Mom", "Alex", "Sam", "Dr. Smith", "Maria", "the office", "Chris"},
	"coin":         {"heads", "tails"},
	"genre":        {"jazz", "rock", "classical", "pop", "country", "hip hop"},
	"song":         {"Blue Highway by The Travellers", "Night Drive by Neon Road", "Open Sky by Lena Park"},
	"vol":          {"2", "3", "4", "5", "6", "7", "8"},
	"seat":         {"driver", "passenger"},
	"window":       {"driver", "passenger", "rear", "all"},
}

// numberSlots draw integers in [lo, hi] (formatted plainly).
var numberSlots = map[string][2]int{
	"miles": {2, 240}, "min": {4, 55}, "short": {2, 15}, "near": {1, 9}, "kmiles": {500, 4800},
	"pct": {10, 95}, "weeks": {2, 8}, "quarts": {4, 6}, "psi": {32, 36}, "lowpsi": {22, 28},
	"mpg": {24, 41}, "tempf": {35, 92}, "temp": {16, 28}, "price": {120, 640}, "hotel": {45, 260},
	"level": {2, 4}, "die": {1, 6}, "fan": {1, 5},
}

// extraSlots are fillers only the in-car requests use.
var extraSlots = map[string][]string{
	"poi":     {"gas station", "charging station", "parking lot", "coffee shop", "rest area", "pharmacy", "hospital", "car wash"},
	"station": {"88.5", "91.3", "94.7", "98.1", "101.5", "104.3", "106.9"},
}
