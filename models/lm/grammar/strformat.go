package grammar

import "bytes"

// String formats as grammars. A "format" the compiler knows is enforced
// exactly or more strictly than RFC 3339 and RFC 4122 say, never more
// loosely: February 29 is left out (it needs the year), and so is the leap
// second, because a validator that asserts formats checks both against the
// calendar. Any other format is refused by name.

// formats are the formats enforced, each a function building its rule.
var formats = map[string]func(c *compiler) int32{
	"date":      func(c *compiler) int32 { return c.b.rule(c.date()) },
	"time":      func(c *compiler) int32 { return c.b.rule(c.timeOfDay()) },
	"date-time": func(c *compiler) int32 { return c.b.rule(seq(c.date(), c.b.lit("T"), c.timeOfDay())) },
	"uuid": func(c *compiler) int32 {
		var out []elem
		for i, n := range []int{8, 4, 4, 4, 12} {
			if i > 0 {
				out = append(out, c.b.byteElem('-'))
			}
			for range n {
				out = append(out, c.hexDigit())
			}
		}
		return c.b.rule(out)
	},
	"ipv4": func(c *compiler) int32 {
		octet := c.natRange(0, 255)
		return c.b.rule(seq(octet, c.b.lit("."), octet, c.b.lit("."), octet, c.b.lit("."), octet))
	},
}

// formatted matches a string of n's format, quotes included; nil with the
// error set when the format is not enforced or sits beside length bounds.
func (c *compiler) formatted(n *node, path string) []elem {
	f := n.get("format")
	if f.kind != 's' || formats[f.str] == nil {
		c.fail(path+"/format", "format %s is not supported", compactString(f))
		return nil
	}
	if n.get("minLength") != nil || n.get("maxLength") != nil {
		c.fail(path, "format beside minLength or maxLength is not supported")
		return nil
	}
	r := c.shared("format:"+f.str, func(int32) [][]elem {
		return [][]elem{{ref(formats[f.str](c))}}
	})
	return seq(c.b.lit(`"`), []elem{ref(r)}, c.b.lit(`"`))
}

func compactString(n *node) string {
	var buf bytes.Buffer
	n.compact(&buf)
	return buf.String()
}

func (c *compiler) hexDigit() elem {
	var hex byteSet
	hex.add('0', '9')
	hex.add('a', 'f')
	hex.add('A', 'F')
	return c.b.set(hex)
}

// date is YYYY-MM-DD with a day the month always has (February to 28).
func (c *compiler) date() []elem {
	b := c.b
	d := b.rangeElem('0', '9')
	day := func(last string) []elem {
		// 01–last for last in 28, 30, 31.
		alts := [][]elem{{b.byteElem('0'), b.rangeElem('1', '9')}, {b.rangeElem('1', '1'), d}}
		switch last {
		case "28":
			alts = append(alts, []elem{b.byteElem('2'), b.rangeElem('0', '8')})
		default:
			alts = append(alts, []elem{b.byteElem('2'), d}, seq(b.lit("3"), []elem{b.rangeElem('0', last[1])}))
		}
		return []elem{ref(b.rule(alts...))}
	}
	month := b.rule(
		seq(b.lit("02-"), day("28")),
		seq([]elem{ref(b.rule(b.lit("04"), b.lit("06"), b.lit("09"), b.lit("11")))}, b.lit("-"), day("30")),
		seq([]elem{ref(b.rule(b.lit("01"), b.lit("03"), b.lit("05"), b.lit("07"), b.lit("08"), b.lit("10"), b.lit("12")))}, b.lit("-"), day("31")))
	return []elem{d, d, d, d, b.byteElem('-'), ref(month)}
}

// timeOfDay is RFC 3339's full-time: HH:MM:SS, an optional fraction, and
// Z or an offset (seconds to 59: no leap second).
func (c *compiler) timeOfDay() []elem {
	b := c.b
	d := b.rangeElem('0', '9')
	hour := []elem{ref(b.rule([]elem{b.rangeElem('0', '1'), d}, []elem{b.byteElem('2'), b.rangeElem('0', '3')}))}
	sixty := []elem{b.rangeElem('0', '5'), d}
	frac := ref(b.optional([]elem{b.byteElem('.'), d, ref(b.star([]elem{d}))}))
	var sign byteSet
	sign.add('+', '+')
	sign.add('-', '-')
	offset := ref(b.rule(b.lit("Z"), seq([]elem{b.set(sign)}, hour, b.lit(":"), sixty)))
	return seq(hour, b.lit(":"), sixty, b.lit(":"), sixty, []elem{frac, offset})
}
