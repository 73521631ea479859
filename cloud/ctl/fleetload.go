package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// fleetLoadConfig is one `fleet load` run: N simulated devices on real
// MQTT v5 connections, each sending a QoS 1 telemetry batch of Batch records
// every Interval for Duration, as the agent's fleet client does.
type fleetLoadConfig struct {
	Broker   string // mqtt://host:port
	Devices  int
	Batch    int
	Interval time.Duration
	Duration time.Duration
	Ramp     time.Duration // connects are spread evenly over this
	Drain    time.Duration // after Duration, how long to wait for outstanding cloud acks
	Prefix   string        // device ids are Prefix + index
	Password string        // MQTT password of every device (username = device id); empty for a --dev broker
	PID      int           // the cloud's pid, for its RSS; 0 for none
}

type fleetLoadResult struct {
	Connected, ConnectFailures         int
	Batches, Records                   uint64 // sent
	PubAcked, CloudAcked, AckedRecords uint64
	PublishErrors                      uint64
	PubackP50, PubackP99               time.Duration
	AckP50, AckP99                     time.Duration
	RSS, PeakRSS                       int64 // bytes, from /proc/PID/status; 0 without a pid
}

func fleetLoad(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("fleet load", flag.ContinueOnError)
	var cfg fleetLoadConfig
	fs.StringVar(&cfg.Broker, "broker", "mqtt://127.0.0.1:1883", "the cloud's MQTT broker (embedded or external), mqtt://host:port")
	fs.IntVar(&cfg.Devices, "devices", 1000, "simulated devices, one MQTT v5 connection each")
	fs.IntVar(&cfg.Batch, "batch", 10, "records per telemetry batch")
	fs.DurationVar(&cfg.Interval, "interval", 10*time.Second, "each device sends one batch this often")
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "how long the devices send, after the ramp")
	fs.DurationVar(&cfg.Ramp, "ramp", 10*time.Second, "the devices' connects are spread evenly over this")
	fs.DurationVar(&cfg.Drain, "drain", 30*time.Second, "after sending stops, how long to wait for the cloud's outstanding acks")
	fs.StringVar(&cfg.Prefix, "prefix", "load-", "device ids are PREFIX0..PREFIXn-1; use a new prefix per run against the same cloud (seqs restart at 1)")
	fs.StringVar(&cfg.Password, "password", "", "MQTT password of every device, username = device id (not needed against phaseless-cloud --dev)")
	fs.IntVar(&cfg.PID, "pid", 0, "the cloud's process id: report its RSS (Linux /proc)")
	if done, err := pkiFlags(fs, cio, args, "fleet load --broker mqtt://HOST:PORT [--devices N --batch B --interval D --duration D --pid PID]"); done || err != nil {
		return err
	}
	if cfg.Devices < 1 || cfg.Batch < 1 || cfg.Interval <= 0 || cfg.Duration <= 0 || cfg.Ramp < 0 || cfg.Drain < 0 {
		return &cli.FieldError{Field: "devices/batch/interval/duration", Err: errors.New("devices, batch, interval and duration must be positive")}
	}
	res, err := runFleetLoad(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "devices:      %d connected, %d connect failures\n", res.Connected, res.ConnectFailures)
	fmt.Fprintf(cio.Stdout, "batches:      %d sent (%d records), %d PUBACKed, %d publish errors, %d acked by the cloud (%d records)\n",
		res.Batches, res.Records, res.PubAcked, res.PublishErrors, res.CloudAcked, res.AckedRecords)
	fmt.Fprintf(cio.Stdout, "rate:         %.1f batches/s offered\n", float64(cfg.Devices)/cfg.Interval.Seconds())
	fmt.Fprintf(cio.Stdout, "cloud ack:    p50 %v  p99 %v (TelemetryAck, sent after the store commit)\n", res.AckP50.Round(time.Millisecond/10), res.AckP99.Round(time.Millisecond/10))
	fmt.Fprintf(cio.Stdout, "puback:       p50 %v  p99 %v\n", res.PubackP50.Round(time.Millisecond/10), res.PubackP99.Round(time.Millisecond/10))
	if cfg.PID > 0 {
		fmt.Fprintf(cio.Stdout, "cloud rss:    %.0f MiB max sampled, %.0f MiB peak (VmHWM)\n", float64(res.RSS)/(1<<20), float64(res.PeakRSS)/(1<<20))
	}
	if res.ConnectFailures > 0 || res.PublishErrors > 0 || res.AckedRecords < res.Records {
		return fmt.Errorf("fleet load: %d connect failures, %d publish errors, %d of %d records not acknowledged by the cloud", res.ConnectFailures, res.PublishErrors, res.Records-res.AckedRecords, res.Records)
	}
	return nil
}

// runFleetLoad connects the devices, runs them and collects the numbers.
// The latency that means "stored" is the cloud's TelemetryAck, which the
// fleet manager publishes only after the batch's store commit; the MQTT
// PUBACK is reported beside it: the device's broker's receipt (with the
// embedded broker, after its journal write), before the manager has stored
// anything.
func runFleetLoad(ctx context.Context, cfg fleetLoadConfig) (*fleetLoadResult, error) {
	u, err := url.Parse(cfg.Broker)
	if err != nil || u.Host == "" || (u.Scheme != "mqtt" && u.Scheme != "tcp") {
		return nil, &cli.FieldError{Field: "broker", Err: fmt.Errorf("%q is not mqtt://host:port", cfg.Broker)}
	}
	var (
		res          fleetLoadResult
		mu           sync.Mutex
		pubacks, cas []time.Duration
		wg           sync.WaitGroup
		connected    atomic.Int64
		failed       atomic.Int64
	)
	tp := fleetwire.Topics{}
	start := time.Now()
	stopSend := start.Add(cfg.Ramp + cfg.Duration)
	for i := range cfg.Devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			delay := time.Duration(0)
			if cfg.Devices > 1 {
				delay = cfg.Ramp * time.Duration(i) / time.Duration(cfg.Devices)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			d := &loadDevice{id: fmt.Sprintf("%s%d", cfg.Prefix, i), sent: map[string]loadSent{}}
			c, err := d.connect(ctx, u.Host, cfg.Password, tp)
			if err != nil {
				failed.Add(1)
				return
			}
			connected.Add(1)
			defer func() { _ = c.Disconnect(&paho.Disconnect{ReasonCode: 0}) }()
			t := time.NewTicker(cfg.Interval)
			defer t.Stop()
			stop := time.NewTimer(time.Until(stopSend))
			defer stop.Stop()
			for seq := uint64(1); time.Now().Before(stopSend); {
				b := fleetwire.TelemetryBatch{DeviceID: d.id, BatchID: d.id + "-" + strconv.FormatUint(seq, 10)}
				data, _ := json.Marshal(fleetwire.RequestRecord{TraceID: b.BatchID, Decision: "local", Path: "local", Outcome: "ok", CloudProb: 0.25, TTFTMillis: 38.5, PromptTokens: 120, CompletionTokens: 64})
				for range cfg.Batch {
					b.Records = append(b.Records, fleetwire.Record{Seq: seq, Time: time.Now().UTC(), Kind: "request", Data: data})
					seq++
				}
				p, _ := json.Marshal(b)
				sentAt := time.Now()
				d.mu.Lock()
				d.sent[b.BatchID] = loadSent{at: sentAt, n: len(b.Records)}
				d.mu.Unlock()
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := c.Publish(pctx, &paho.Publish{QoS: 1, Topic: tp.Device(d.id, fleetwire.SuffixTelemetry), Payload: p})
				cancel()
				mu.Lock()
				res.Batches++
				res.Records += uint64(len(b.Records))
				if err != nil {
					res.PublishErrors++
				} else {
					res.PubAcked++
					pubacks = append(pubacks, time.Since(sentAt))
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-stop.C: // the next batch would be due after the run
				case <-t.C:
					continue
				}
				break
			}
			// Wait out the cloud's acks for what was sent.
			for deadline := time.Now().Add(cfg.Drain); time.Now().Before(deadline) && d.outstanding() > 0 && ctx.Err() == nil; {
				time.Sleep(20 * time.Millisecond)
			}
			d.mu.Lock()
			mu.Lock()
			res.CloudAcked += d.acked
			res.AckedRecords += d.ackedRecords
			cas = append(cas, d.lat...)
			mu.Unlock()
			d.mu.Unlock()
		}()
	}
	var peak int64
	if cfg.PID > 0 {
		// Sample the cloud's RSS while the devices run; VmHWM covers spikes
		// between samples.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for sampling := true; sampling; {
			select {
			case <-done:
				sampling = false
			case <-time.After(time.Second):
			}
			if rss, hwm, err := procRSS(cfg.PID); err == nil {
				res.RSS, peak = max(res.RSS, rss), max(peak, hwm)
			}
		}
		res.PeakRSS = peak
	}
	wg.Wait()
	res.Connected, res.ConnectFailures = int(connected.Load()), int(failed.Load())
	res.PubackP50, res.PubackP99 = quantile(pubacks, 0.5), quantile(pubacks, 0.99)
	res.AckP50, res.AckP99 = quantile(cas, 0.5), quantile(cas, 0.99)
	return &res, ctx.Err()
}

type loadSent struct {
	at time.Time
	n  int
}

type loadDevice struct {
	id                  string
	mu                  sync.Mutex // guards what follows
	sent                map[string]loadSent
	acked, ackedRecords uint64
	lat                 []time.Duration
}

func (d *loadDevice) outstanding() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sent)
}

func (d *loadDevice) onAck(payload []byte) {
	var a fleetwire.TelemetryAck
	if json.Unmarshal(payload, &a) != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.sent[a.BatchID]; ok {
		d.acked++
		d.ackedRecords += uint64(s.n)
		d.lat = append(d.lat, time.Since(s.at))
		delete(d.sent, a.BatchID)
	}
}

// connect opens the device's session as the agent does: username = device
// id, a retained offline last will, the ack subscription, then the retained
// online status.
func (d *loadDevice) connect(ctx context.Context, host, password string, tp fleetwire.Topics) (*paho.Client, error) {
	conn, err := (&net.Dialer{Timeout: 30 * time.Second}).DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	c := paho.NewClient(paho.ClientConfig{ClientID: d.id, Conn: conn, PacketTimeout: 30 * time.Second,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			d.onAck(pr.Packet.Payload)
			return true, nil
		}}})
	will, _ := json.Marshal(fleetwire.Status{DeviceID: d.id, State: "offline", Version: "load-1"})
	cp := &paho.Connect{ClientID: d.id, KeepAlive: 60, CleanStart: true, Username: d.id, UsernameFlag: true,
		WillMessage: &paho.WillMessage{Topic: tp.Device(d.id, fleetwire.SuffixStatus), Payload: will, QoS: 1, Retain: true}}
	if password != "" {
		cp.Password, cp.PasswordFlag = []byte(password), true
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ca, err := c.Connect(cctx, cp)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, fmt.Errorf("%s: CONNACK %d", d.id, ca.ReasonCode)
	}
	fail := func(err error) (*paho.Client, error) { _ = c.Disconnect(&paho.Disconnect{}); return nil, err }
	sa, err := c.Subscribe(cctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: tp.Device(d.id, fleetwire.SuffixTelemetryAck), QoS: 1}}})
	if err != nil {
		return fail(err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] > 1 {
		return fail(fmt.Errorf("%s: SUBACK %v", d.id, sa.Reasons))
	}
	online, _ := json.Marshal(fleetwire.Status{DeviceID: d.id, State: "online", Version: "load-1", Slot: "a", Time: time.Now()})
	if _, err := c.Publish(cctx, &paho.Publish{QoS: 1, Retain: true, Topic: tp.Device(d.id, fleetwire.SuffixStatus), Payload: online}); err != nil {
		return fail(err)
	}
	return c, nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// procRSS reads VmRSS and VmHWM (bytes) of a process.
func procRSS(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) < 1 || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.New("no VmRSS")
	}
	return rss, hwm, nil
}
