// Package sse reads Server-Sent Events streams (WHATWG HTML §9.2) as the
// OpenAI and Anthropic APIs write them: events of `event:` and `data:`
// lines ended by a blank line, plus any other field a server adds (as
// Phaseless does with its stats field, transport/httpapi.StatsField),
// which readers that do not know it skip.
//
// It is the reading half only; the servers in transport/httpapi write their
// events directly. Lines, and the lines of one event together, are bounded
// so a hostile server cannot make a reader buffer without end.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine bounds one line (1 MiB): far above any event the APIs
// send, far below what would hurt a device.
const DefaultMaxLine = 1 << 20

// ErrLineTooLong is returned for a line over the reader's bound.
var ErrLineTooLong = errors.New("sse: line too long")

// ErrEventTooLarge is returned for an event whose lines together exceed
// four lines' bound, or that has more than maxFields extra fields: short
// data lines that never end in a blank line would otherwise be buffered
// until the stream ends, or forever.
var ErrEventTooLarge = errors.New("sse: event too large")

// maxFields bounds the distinct extra fields of one event.
const maxFields = 64

// Event is one dispatched event.
type Event struct {
	Name string // the event field; "" for data-only events (OpenAI)
	Data []byte // the data lines joined with "\n"
	// Fields holds the other fields by name, last value winning, for
	// fields a server adds beyond the standard ones. Nil when none.
	Fields map[string][]byte
}

// Reader reads events from a stream.
type Reader struct {
	br      *bufio.Reader
	maxLine int
}

// NewReader returns a Reader of r whose lines are at most maxLine bytes
// (0 means DefaultMaxLine).
func NewReader(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &Reader{br: bufio.NewReaderSize(r, 16<<10), maxLine: maxLine}
}

// ReadLine reads one line without its line ending (LF, CRLF or a lone CR
// before LF) from br, at most max bytes, else ErrLineTooLong. It returns
// io.EOF only when no byte of a line was read.
func ReadLine(br *bufio.Reader, max int) ([]byte, error) {
	var b []byte
	for {
		frag, isPrefix, err := br.ReadLine()
		if err != nil {
			if errors.Is(err, io.EOF) && len(b) > 0 {
				return b, nil
			}
			return nil, err
		}
		b = append(b, frag...)
		if len(b) > max {
			return nil, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, max)
		}
		if !isPrefix {
			return b, nil
		}
	}
}

// Next returns the next event. Comment lines (":...") are skipped, and so
// are blank lines that end an event with nothing in it. At the end of the
// stream it returns io.EOF; an event cut off by the end is dropped, as the
// standard says, and reported as io.ErrUnexpectedEOF so a caller can tell a
// truncated stream from a finished one.
func (r *Reader) Next() (Event, error) {
	var (
		ev      Event
		hasData bool
		any     bool
		size    int // bytes of the event's lines so far
	)
	for {
		line, err := ReadLine(r.br, r.maxLine)
		if err != nil {
			if errors.Is(err, io.EOF) && any {
				return Event{}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if !any {
				continue
			}
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		if size += len(line) + 1; size > 4*r.maxLine {
			return Event{}, fmt.Errorf("%w: over %d bytes", ErrEventTooLarge, 4*r.maxLine)
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		any = true
		switch string(name) {
		case "event":
			ev.Name = string(value)
		case "data":
			if hasData {
				ev.Data = append(ev.Data, '\n')
			}
			ev.Data = append(ev.Data, value...)
			hasData = true
		case "id", "retry":
			// Reconnection state: the APIs never resume a stream.
		default:
			if ev.Fields == nil {
				ev.Fields = map[string][]byte{}
			}
			if _, seen := ev.Fields[string(name)]; !seen && len(ev.Fields) == maxFields {
				return Event{}, fmt.Errorf("%w: over %d fields", ErrEventTooLarge, maxFields)
			}
			ev.Fields[string(name)] = bytes.Clone(value)
		}
	}
}
