package chatfmt

import (
	"testing"

	"github.com/phaseless/phaseless/llm"
)

func TestChatPrompt(t *testing.T) {
	got := Prompt([]llm.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: " Turn on the AC \n"}})
	want := "<|system|>\nBe brief.\n<|user|>\nTurn on the AC\n<|assistant|>\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
