package cloud

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/cli"
)

// TestDevListeners: --dev binds loopback where the address names no host,
// refuses a non-loopback host unless --dev-expose, and --dev-expose binds
// what it is given.
func TestDevListeners(t *testing.T) {
	for _, tt := range []struct {
		name      string
		dev, open bool
		http      string
		bind      string // ListenAddr(http); "" when Validate refuses
	}{
		{"dev, port only", true, false, ":8080", "127.0.0.1:8080"},
		{"dev, loopback", true, false, "127.0.0.1:8080", "127.0.0.1:8080"},
		{"dev, IPv6 loopback", true, false, "[::1]:8080", "[::1]:8080"},
		{"dev, localhost", true, false, "localhost:8080", "localhost:8080"},
		{"dev, every interface", true, false, "0.0.0.0:8080", ""},
		{"dev, a LAN address", true, false, "10.0.0.5:8080", ""},
		{"dev-expose, port only", true, true, ":8080", ":8080"},
		{"dev-expose, every interface", true, true, "0.0.0.0:8080", "0.0.0.0:8080"},
		{"keys, port only", false, false, ":8080", ":8080"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{HTTP: tt.http, Dev: tt.dev, DevExpose: tt.open, DataDir: "d"}
			if !tt.dev {
				cfg.APIKeys = "keys.txt"
			}
			cfg.FillDefaults()
			err := cfg.Validate()
			if tt.bind == "" {
				var fe *cli.FieldError
				if !errors.As(err, &fe) || fe.Field != "HTTP" || !strings.Contains(err.Error(), "--dev-expose") {
					t.Fatalf("Validate: %v, want a refusal of HTTP naming --dev-expose", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.ListenAddr(tt.http); got != tt.bind {
				t.Errorf("binds %s, want %s", got, tt.bind)
			}
		})
	}
	if err := (&Config{HTTP: ":8080", DevExpose: true, APIKeys: "k", DataDir: "d", Budget: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "--dev") {
		t.Errorf("--dev-expose without --dev: %v", err)
	}

	// A running --dev cloud given ports only listens on loopback.
	c := startCloud(t, func(cfg *Config) { cfg.HTTP, cfg.QUIC, cfg.MQTT, cfg.MQTTTLS = ":0", ":0", ":0", ":0" })
	for what, addr := range map[string]string{"HTTP": c.HTTPAddr(), "QUIC": c.QUICAddr(), "MQTT": c.MQTTAddr(), "MQTT/TLS": c.MQTTTLSAddr()} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Errorf("%s listens on %q, want 127.0.0.1", what, addr)
		}
	}
}

// TestDevFirstLogLine: the first line phaseless-cloud --dev logs says what
// it serves without keys, and where.
func TestDevFirstLogLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	// The data dir cannot be made, so the cloud stops right after its
	// first lines, before it binds anything.
	code := Daemon().Exec(cio, []string{"--dev", "--data-dir", "/dev/null/cloud", "--builtin-workers", "0", "--worker", "sim://h100?model=llama3.1-8b&n=1"})
	first, _, _ := strings.Cut(stderr.String(), "\n")
	for _, want := range []string{"level=WARN", "--dev", "without keys", "HTTP 127.0.0.1:8080: the inference API", "MQTT 127.0.0.1:1883", "QUIC 127.0.0.1:4433", "loopback only"} {
		if !strings.Contains(first, want) {
			t.Errorf("first log line lacks %q: %s", want, first)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1 (the data dir)\n%s", code, stderr.String())
	}
}
