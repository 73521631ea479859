package deploy

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/phaseless/phaseless/cloud"
)

type scrapeFile struct {
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		MetricsPath   string `json:"metrics_path"`
		Authorization struct {
			Type            string `json:"type"`
			CredentialsFile string `json:"credentials_file"`
		} `json:"authorization"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

// TestPrometheusScrapeConfig: every job in the shipped scrape config sends
// a bearer key from a file, and a real cloud with --api-keys answers such a
// scrape (the key file holding a viewer key, as Prometheus reads it, a
// trailing newline included) and refuses one without a key (issue 27).
func TestPrometheusScrapeConfig(t *testing.T) {
	b, err := os.ReadFile("prometheus/scrape.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f scrapeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.ScrapeConfigs) == 0 {
		t.Fatal("no scrape jobs")
	}
	for _, j := range f.ScrapeConfigs {
		if j.MetricsPath != "/metrics" || j.Authorization.Type != "Bearer" || !filepath.IsAbs(j.Authorization.CredentialsFile) {
			t.Errorf("job %s: path %q, authorization %+v: want /metrics with a Bearer key from a file", j.JobName, j.MetricsPath, j.Authorization)
		}
	}

	dir := t.TempDir()
	keys, keyFile := filepath.Join(dir, "keys"), filepath.Join(dir, "metrics.key")
	os.WriteFile(keys, []byte("sk-app-000001 apps\nsk-prom-00001 prometheus role=viewer\n"), 0o600)
	os.WriteFile(keyFile, []byte("sk-prom-00001\n"), 0o600)
	var cfg cloud.Config
	fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cfg.HTTP, cfg.QUIC, cfg.MQTT, cfg.MQTTTLS, cfg.DataDir, cfg.Dev, cfg.APIKeys = "127.0.0.1:0", "", "", "", dir, true, keys
	c, err := cloud.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.Serving(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	scrape := func(credentialsFile string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+c.HTTPAddr()+f.ScrapeConfigs[0].MetricsPath, nil)
		if credentialsFile != "" {
			key, err := os.ReadFile(credentialsFile)
			if err != nil {
				t.Fatal(err)
			}
			// Prometheus trims the file's surrounding space.
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if status, body := scrape(keyFile); status != 200 || !strings.Contains(body, "# TYPE phaseless_") {
		t.Errorf("scrape with the viewer key: %d %.200s", status, body)
	}
	if status, _ := scrape(""); status != http.StatusUnauthorized {
		t.Errorf("scrape without a key: %d, want 401", status)
	}
}
