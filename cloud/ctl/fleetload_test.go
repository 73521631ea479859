package ctl

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/internal/cli"
)

// TestFleetLoad runs `fleet load` small against a real fleet manager with
// the embedded broker: every record the devices sent must be acknowledged by
// the cloud and stored exactly once, by the fleet API's counts.
func TestFleetLoad(t *testing.T) {
	b, m := startFleet(t, fleet.Config{})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	api, err := fleetapi.NewClient(srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	res, err := runFleetLoad(ctx, fleetLoadConfig{Broker: "mqtt://" + b.TCPAddr(), Devices: 50, Batch: 10,
		Interval: 300 * time.Millisecond, Duration: 2 * time.Second, Ramp: 200 * time.Millisecond, Drain: 30 * time.Second,
		Prefix: "load-", PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != 50 || res.ConnectFailures != 0 || res.PublishErrors != 0 {
		t.Fatalf("connected %d, failures %d, publish errors %d", res.Connected, res.ConnectFailures, res.PublishErrors)
	}
	if res.Batches < 50 || res.Records != 10*res.Batches || res.CloudAcked != res.Batches || res.AckedRecords != res.Records || res.PubAcked != res.Batches {
		t.Fatalf("result %+v", res)
	}
	if res.AckP50 <= 0 || res.AckP99 < res.AckP50 || res.RSS <= 0 || res.PeakRSS < res.RSS {
		t.Fatalf("latencies or rss missing: %+v", res)
	}
	c, err := api.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ingested != res.Records || c.Stored != res.Records || c.Duplicates != 0 || c.Devices != 50 {
		t.Fatalf("counts %+v, sent %d records", c, res.Records)
	}

	// The command itself, with a fresh prefix: its report and exit status.
	var out bytes.Buffer
	cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
	err = Root().Dispatch(ctx, cio, []string{"fleet", "load", "--broker", "mqtt://" + b.TCPAddr(), "--devices", "5", "--batch", "3",
		"--interval", "200ms", "--duration", "500ms", "--ramp", "0s", "--prefix", "cli-", "--pid", strconv.Itoa(os.Getpid())})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"5 connected, 0 connect failures", "cloud ack:    p50", "cloud rss:"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	if c2, err := api.Counts(ctx); err != nil || c2.Devices != 55 || c2.Duplicates != 0 {
		t.Fatalf("counts after the command %+v, %v", c2, err)
	}
	if _, err := runFleetLoad(ctx, fleetLoadConfig{Broker: "http://x", Devices: 1}); err == nil {
		t.Fatal("a non-mqtt broker URL was accepted")
	}
}
