package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestReassembler: characters and surrogate pairs cut between deltas come
// out whole; bytes that never complete become U+FFFD.
func TestReassembler(t *testing.T) {
	euro := "€" // e2 82 ac
	for _, c := range []struct {
		name   string
		deltas []string
		want   []string // Write's results, then Flush's
	}{
		{"whole", []string{"ab", "c"}, []string{"ab", "c", ""}},
		{"split3", []string{"a" + euro[:1], euro[1:2], euro[2:] + "b"}, []string{"a", "", "€b", ""}},
		{"emoji", []string{"😀"[:2], "😀"[2:]}, []string{"", "😀", ""}},
		{"surrogates", []string{"\xed\xa0\xbd", "\xed\xb8\x80!"}, []string{"", "😀!", ""}},
		{"lone-high", []string{"\xed\xa0\xbdx"}, []string{"\uFFFDx", ""}},
		{"lone-high-at-end", []string{"\xed\xa0\xbd"}, []string{"", "\uFFFD"}},
		{"invalid", []string{"a\xffb"}, []string{"a\uFFFDb", ""}},
		{"cut-at-end", []string{"a" + euro[:2]}, []string{"a", "\uFFFD\uFFFD"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r Reassembler
			var got []string
			for _, d := range c.deltas {
				got = append(got, r.Write([]byte(d)))
			}
			got = append(got, r.Flush())
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestUnquoteRaw keeps raw bytes and lone surrogates that encoding/json
// would replace, and agrees with it on everything else.
func TestUnquoteRaw(t *testing.T) {
	for in, want := range map[string]string{
		`"a\"b\\c\/\n\t\u00e9"`: "a\"b\\c/\n\té",
		`"\ud83d\ude00"`:        "😀",
		`"\ud83d"`:              "\xed\xa0\xbd",
		"\"\xe2\x82\"":          "\xe2\x82",
	} {
		got, err := unquoteRaw([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{``, `"`, `"a`, `"\x"`, `"\u12"`, "\"a\nb\"", `"a"b"`} {
		if _, err := unquoteRaw([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// rawServer is an OpenAI- or Anthropic-shaped server of another make that
// streams byte-level tokens as they come, cutting characters between
// events: raw bytes inside the JSON strings, and a surrogate pair cut in two
// escapes.
func rawServer(t *testing.T, api API) string {
	t.Helper()
	deltas := []string{`"Gr\u00fc` + "\xc3\"", "\"\x9fe \xf0\x9f\"", "\"\x91\x8d \"", `"\ud83d"`, `"\ude00!"`}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if api == Anthropic {
			fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n")
			for _, d := range deltas {
				fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%s}}\n\n", d)
			}
			fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			return
		}
		for _, d := range deltas {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s},\"finish_reason\":null}]}\n\n", d)
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStreamReassemblesRawBytes: over real HTTP, in both APIs, the app
// gets only whole characters and the full text.
func TestStreamReassemblesRawBytes(t *testing.T) {
	for _, api := range []API{OpenAI, Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			c := newClient(t, Config{URL: rawServer(t, api), API: api, HTTPClient: &http.Client{}})
			var pieces []string
			resp, err := c.Stream(context.Background(), hello(), func(s string) error {
				if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
					t.Errorf("piece %q splits a character", s)
				}
				pieces = append(pieces, s)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != "Grüße 👍 😀!" || resp.FinishReason != "stop" {
				t.Errorf("text %q finish %q pieces %q", resp.Text, resp.FinishReason, pieces)
			}
		})
	}
}

// FuzzReassembler: however a byte stream is cut into deltas, the text is
// the same as written in one piece, and always valid UTF-8.
func FuzzReassembler(f *testing.F) {
	f.Add([]byte("a€😀\xed\xa0\xbd\xed\xb8\x80\xff"), uint8(1), uint8(3))
	f.Add([]byte("\xed\xa0\xbd\xed"), uint8(2), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, s1, s2 uint8) {
		var whole Reassembler
		want := whole.Write(b) + whole.Flush()
		var cut Reassembler
		i, j := min(int(s1), len(b)), min(int(s1)+int(s2), len(b))
		got := cut.Write(b[:i]) + cut.Write(b[i:j]) + cut.Write(b[j:]) + cut.Flush()
		if got != want {
			t.Fatalf("cut at %d,%d: %q, whole: %q", i, j, got, want)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 out: %q", got)
		}
		if cut.Pending() != 0 {
			t.Fatal("pending after Flush")
		}
	})
}

// FuzzUnquoteRaw: never panics; on any string encoding/json writes, it
// agrees with encoding/json.
func FuzzUnquoteRaw(f *testing.F) {
	f.Add([]byte(`"a\u00e9\ud83d\ude00\n"`), "x€")
	f.Add([]byte(`"\ud800"`), "")
	f.Fuzz(func(t *testing.T, raw []byte, s string) {
		unquoteRaw(raw)
		if !utf8.ValidString(s) {
			return
		}
		q, _ := json.Marshal(s)
		got, err := unquoteRaw(q)
		if err != nil || string(got) != s {
			t.Fatalf("%s: %q %v, want %q", q, got, err, s)
		}
	})
}
