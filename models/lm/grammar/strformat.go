package grammar

import "bytes"

// String formats as grammars. A "format" the compiler knows is enforced
// exactly or more strictly than RFC 3339, RFC 4122, RFC 3986, RFC 5321 and
// RFC 1123 say, never more loosely: February 29 is left out (it needs the
// year), and so is the leap second, because a validator that asserts
// formats checks both against the calendar; an email or a hostname is at
// most 63 characters, so that every label and the local part are within
// their limits (64, 63) without counting them apart. A format the JSON
// Schema specification defines (any draft) and the compiler does not
// enforce is refused by name. Any other format is an annotation, as the
// specification says of formats it does not define ("topic", "path",
// "semver"): no validator asserts it, so it constrains nothing.

// specFormats are the formats JSON Schema's drafts define.
var specFormats = map[string]bool{
	"date-time": true, "date": true, "time": true, "duration": true, "email": true, "idn-email": true,
	"hostname": true, "idn-hostname": true, "ipv4": true, "ipv6": true, "uri": true, "uri-reference": true,
	"iri": true, "iri-reference": true, "uuid": true, "uri-template": true, "json-pointer": true,
	"relative-json-pointer": true, "regex": true,
	// draft 3
	"host-name": true, "ip-address": true, "color": true, "style": true, "phone": true, "utc-millisec": true,
}

// assertsFormat reports whether n has a format that constrains the value:
// one the specification defines (enforced or refused), or one that is not
// a string at all (refused).
func assertsFormat(n *node) bool {
	f := n.get("format")
	return f != nil && (f.kind != 's' || specFormats[f.str])
}

// Pieces of the RFC 3986 grammar, as ECMA-262 classes and groups (the
// pattern compiler turns them into rules). A host is a reg-name without
// percent-encoding (Go's url.Parse, which santhosh-tekuri's validator
// uses, refuses most of it there) and never an IP literal: stricter only.
const (
	pctEnc    = `%[0-9A-Fa-f]{2}`
	pchar     = `(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|` + pctEnc + `)`
	segment   = pchar + `*`
	authority = `(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|` + pctEnc + `)*@)?[A-Za-z0-9\-._~!$&'()*+,;=]*(?::[0-9]*)?`
	pathRest  = `(?:/` + segment + `)*`
	queryFrag = `(?:\?(?:` + pchar + `|[/?])*)?(?:#(?:` + pchar + `|[/?])*)?`
	// hier-part without path-rootless, shared by URI and relative-ref.
	rooted   = `//` + authority + pathRest + `|/(?:` + pchar + `+` + pathRest + `)?|`
	uriRE    = `^[A-Za-z][A-Za-z0-9+.\-]*:(?:` + rooted + `|` + pchar + `+` + pathRest + `)` + queryFrag + `$`
	relRE    = `^(?:` + rooted + `|(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|` + pctEnc + `)+` + pathRest + `)` + queryFrag + `$`
	labelRE  = `[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?`
	domainRE = labelRE + `(?:\.` + labelRE + `)*`
)

// patternFormats are the formats enforced as a pattern and a length bound
// (0: none).
var patternFormats = map[string]struct {
	re  string
	max int
}{
	"uri":           {uriRE, 0},
	"uri-reference": {`(?:` + uriRE + `)|(?:` + relRE + `)`, 0},
	"email":         {"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]+)*@" + domainRE + "$", 63},
	"hostname":      {`^` + domainRE + `$`, 63},
}

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
	pf, isPattern := patternFormats[f.str]
	if f.kind != 's' || formats[f.str] == nil && !isPattern {
		c.fail(path+"/format", "format %s is not supported", compactString(f))
		return nil
	}
	if n.get("minLength") != nil || n.get("maxLength") != nil {
		c.fail(path, "format beside minLength or maxLength is not supported")
		return nil
	}
	if isPattern {
		return []elem{ref(c.shared("format:"+f.str, func(int32) [][]elem {
			return [][]elem{c.pattern(pf.re, path, 0, pf.max, pf.max > 0)}
		}))}
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
