package sse

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestReader(t *testing.T) {
	in := ": comment\n\nevent: message_start\ndata: {\"a\":1}\nphaseless: {\"gen_us\":5}\n\n" +
		"data: one\r\ndata: two\r\n\r\nid: 7\nretry: 10\ndata:[DONE]\n\n"
	r := NewReader(strings.NewReader(in), 0)
	want := []Event{
		{Name: "message_start", Data: []byte(`{"a":1}`), Fields: map[string][]byte{"phaseless": []byte(`{"gen_us":5}`)}},
		{Data: []byte("one\ntwo")},
		{Data: []byte("[DONE]")},
	}
	for i, w := range want {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Name != w.Name || string(ev.Data) != string(w.Data) || len(ev.Fields) != len(w.Fields) {
			t.Fatalf("event %d = %+v, want %+v", i, ev, w)
		}
		for k, v := range w.Fields {
			if string(ev.Fields[k]) != string(v) {
				t.Errorf("event %d field %s = %q, want %q", i, k, ev.Fields[k], v)
			}
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last event: %v, want EOF", err)
	}
}

func TestReaderTruncatedAndLong(t *testing.T) {
	if _, err := NewReader(strings.NewReader("data: cut"), 0).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut event: %v", err)
	}
	if _, err := NewReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 64).Next(); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("long line: %v", err)
	}
	// Short lines that never end their event: bounded too.
	if _, err := NewReader(strings.NewReader(strings.Repeat("data: xxxxxxxx\n", 100)+"\n"), 64).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("endless event: %v", err)
	}
	var fields strings.Builder
	for i := range maxFields + 1 {
		fmt.Fprintf(&fields, "f%d: x\n", i)
	}
	if _, err := NewReader(strings.NewReader(fields.String()+"\n"), 0).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("%d fields: %v", maxFields+1, err)
	}
	// Four lines' worth is still one event.
	if ev, err := NewReader(strings.NewReader(strings.Repeat("data: xx\n", 4)+"\n"), 64).Next(); err != nil || len(ev.Data) != 11 {
		t.Errorf("four short lines: %q, %v", ev.Data, err)
	}
}

// FuzzReader: any bytes end in events and then an error, never a panic or
// a line over the bound.
func FuzzReader(f *testing.F) {
	f.Add([]byte("event: x\ndata: y\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\n\r\n:c\nphaseless: {}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(strings.NewReader(string(b)), 256)
		for range len(b) + 1 {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > len(b) || len(ev.Data) > 4*256 {
				t.Fatalf("event data %d bytes from %d of input", len(ev.Data), len(b))
			}
		}
		t.Fatal("more events than input bytes")
	})
}
