package metrics

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"strconv"
)

// Sums parses Prometheus text exposition — the format Registry writes, or a
// foreign server's (vLLM, another Phaseless) — and returns, for each wanted
// metric name, the sum over its label sets (a vLLM server labels by model;
// one server is one worker, so the sum is the server's value). Names not
// present are absent from the result. Malformed lines are skipped: a scrape
// of a foreign server must never fail its reader over one odd line.
func Sums(body []byte, want map[string]bool) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, err := parseLine(sc.Bytes())
		if err != nil || !want[name] {
			continue
		}
		out[name] += v
	}
	return out
}

var errLine = errors.New("malformed metric line")

// parseLine parses `name{labels} value [timestamp]`.
func parseLine(line []byte) (string, float64, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return "", 0, errLine
	}
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	name := string(line[:i])
	if name == "" {
		return "", 0, errLine
	}
	rest := line[i:]
	if len(rest) > 0 && rest[0] == '{' {
		// Skip the label block, honouring quoted values with escapes.
		j, inQuote := 1, false
		for ; j < len(rest); j++ {
			c := rest[j]
			if inQuote {
				if c == '\\' {
					j++
				} else if c == '"' {
					inQuote = false
				}
				continue
			}
			if c == '"' {
				inQuote = true
			} else if c == '}' {
				break
			}
		}
		if j >= len(rest) {
			return "", 0, errLine
		}
		rest = rest[j+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return "", 0, errLine
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || math.IsNaN(v) {
		return "", 0, errLine
	}
	return name, v, nil
}
