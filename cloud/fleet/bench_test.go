package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/cloud/fleet/pgtest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func benchBatch(dev string, first uint64) *fleetwire.TelemetryBatch {
	b := &fleetwire.TelemetryBatch{DeviceID: dev, BatchID: fmt.Sprint(first)}
	data, _ := json.Marshal(fleetwire.RequestRecord{TraceID: "0123456789abcdef", Features: make([]float32, 16), CloudProb: 0.42, Decision: "local", Reason: "predictor", Path: "local", TTFTMillis: 38.5, ITLMillis: 12.25, PromptTokens: 120, CompletionTokens: 64, Outcome: "ok"})
	for s := first; s < first+100; s++ {
		b.Records = append(b.Records, fleetwire.Record{Seq: s, Time: time.Unix(1_800_000_000, 0), Kind: "request", Data: data})
	}
	return b
}

// BenchmarkIngest stores batches of 100 records. "plain" is the baseline in
// the same run: the same export lines put into bbolt in one transaction per
// batch, without the idempotency index, device record or retention.
// "parallel" is 16 devices at once (broker goroutines), sharing commits.
func BenchmarkIngest(b *testing.B) {
	b.Run("plain-bbolt-baseline", func(b *testing.B) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "plain.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		var n uint64
		for i := 0; b.Loop(); i++ {
			batch := benchBatch("dev-1", uint64(i)*100+1)
			err := db.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists(bucketRecords)
				if err != nil {
					return err
				}
				for _, r := range batch.Records {
					n++
					line, _ := json.Marshal(ExportedRecord{DeviceID: "dev-1", Record: r})
					if err := bk.Put(recordKey(time.Now(), n), line); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("idempotent", func(b *testing.B) {
		st, err := openStore(filepath.Join(b.TempDir(), "fleet.db"))
		if err != nil {
			b.Fatal(err)
		}
		defer st.db.Close()
		for i := 0; b.Loop(); i++ {
			if _, err := st.ingest("dev-1", benchBatch("dev-1", uint64(i)*100+1), time.Now(), 1<<40, 0); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("idempotent-parallel", func(b *testing.B) {
		st, err := openStore(filepath.Join(b.TempDir(), "fleet.db"))
		if err != nil {
			b.Fatal(err)
		}
		defer st.db.Close()
		parallelIngest(b, st)
	})
	// The same on PostgreSQL (--fleet-db): a throwaway cluster, skipped
	// without its binaries outside CI.
	b.Run("idempotent-parallel-postgres", func(b *testing.B) {
		st, err := openPGStore(context.Background(), pgtest.CreateDB(b, pgtest.Start(b), "bench"))
		if err != nil {
			b.Fatal(err)
		}
		defer st.close()
		parallelIngest(b, st)
	})
}

// parallelIngest is 16 devices storing batches at once (broker goroutines),
// sharing commits where the store can.
func parallelIngest(b *testing.B, st fleetStore) {
	var dev atomic.Int64
	b.SetParallelism(8) // 16 goroutines on 2 cores
	b.ResetTimer()      // not the store's set-up (a PostgreSQL cluster's initdb)
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("dev-%d", dev.Add(1))
		for i := uint64(0); pb.Next(); i++ {
			if _, err := st.ingest(id, benchBatch(id, i*100+1), time.Now(), 1<<40, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
	if pg, ok := st.(*pgStore); ok && pg.queue.groups.Load() > 0 {
		b.ReportMetric(float64(pg.queue.batches.Load())/float64(pg.queue.groups.Load()), "batches/txn")
	}
}

// BenchmarkUplink is one device sending batches of 100 through the embedded
// broker and waiting for each TelemetryAck: end to end, bbolt commit
// included. The baseline in the same run is the bare MQTT QoS 1 round trip
// of the same payload to the same broker (PUBACK only, nothing stored).
func BenchmarkUplink(b *testing.B) {
	br, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	m, err := Open(Config{DataDir: b.TempDir(), Broker: br, MaxRecords: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	run := func(b *testing.B, id string, waitAck bool) {
		d := &rawDevice{id: id}
		if err := d.connect(br.TCPAddr()); err != nil {
			b.Fatal(err)
		}
		defer d.conn.Close()
		topic := topics.Device(id, fleetwire.SuffixTelemetry)
		if !waitAck {
			topic = topics.Device(id, "bench") // nobody stores it
		}
		for i := 0; b.Loop(); i++ {
			payload, _ := json.Marshal(benchBatch(id, uint64(i)*100+1))
			pp := packets.NewControlPacket(packets.PUBLISH)
			p := pp.Content.(*packets.Publish)
			p.QoS, p.PacketID, p.Topic, p.Payload = 1, uint16(i%60000+2), topic, payload
			if err := d.write(pp); err != nil {
				b.Fatal(err)
			}
			for gotAck, gotPuback := !waitAck, false; !gotAck || !gotPuback; {
				r, err := d.read()
				if err != nil {
					b.Fatal(err)
				}
				switch r.Content.(type) {
				case *packets.Puback:
					gotPuback = true
				case *packets.Publish:
					gotAck = true
				}
			}
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("mqtt-qos1-baseline", func(b *testing.B) { run(b, "bench-raw", false) })
	b.Run("end-to-end-acked", func(b *testing.B) { run(b, "bench-e2e", true) })
}

// BenchmarkExternalIngest is 200 devices sending batches of 10 through a
// real Mosquitto, each waiting for its TelemetryAck before the next, as
// devices with a backlog do. "serial" (External.Workers 1: every message
// handled on paho's goroutine, as before issue 37) is the baseline in the
// same run; "lanes" is the default.
func BenchmarkExternalIngest(b *testing.B) {
	const devices = 200
	users := map[string]string{"phaseless-cloud": "cloud-pw"}
	for i := range devices {
		users[fmt.Sprintf("x-%03d", i)] = "pw"
	}
	url := startMosquitto(b, users, "phaseless-cloud")
	for _, tc := range []struct {
		name    string
		workers int
	}{{"serial", 1}, {"lanes", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			m := openManager(b, Config{DataDir: b.TempDir(), MaxRecords: 1 << 40, External: &External{
				URL: url, Username: "phaseless-cloud", Password: "cloud-pw", ClientID: "bench-" + tc.name, Workers: tc.workers}})
			waitFor(b, "manager connected", func() bool { return m.Ready() == nil })
			devs := make([]*rawDevice, devices)
			for i := range devs {
				devs[i] = &rawDevice{id: fmt.Sprintf("x-%03d", i), pass: "pw"}
				if err := devs[i].connect(mqttHost(url)); err != nil {
					b.Fatal(err)
				}
				defer devs[i].conn.Close()
			}
			var next atomic.Int64
			var seq [devices]uint64
			b.ResetTimer()
			var wg sync.WaitGroup
			for i, d := range devs {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := d.uplink(seq[i]+1, 10); err != nil {
							b.Error(err)
							return
						}
						seq[i] += 10
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
		})
	}
}

// mqttHost is host:port of an mqtt:// URL.
func mqttHost(u string) string { return strings.TrimPrefix(u, "mqtt://") }

// BenchmarkIdleDeviceMemory connects 2,000 devices to the embedded broker
// behind a Manager and reports the Go heap and goroutine stacks each one
// holds in the cloud, after collections. The devices run in a child
// process (this test binary again, benchDevicesMain), so nothing of the
// client side is counted. "idle" devices connect and subscribe to their
// acks; "sent-once" ones also register a retained last will, publish a
// retained online status and one batch of 10 records and wait for its ack,
// as `phaselessctl fleet load`'s devices do in .ci/fleetload's 60 s runs,
// so the Manager and the broker keep what a device that reported holds.
// "mochi-defaults" (mochi's own 8,192-packet client queue and 2 KiB read
// buffer) is the baseline in the same run. (Linux RSS moves with the
// heap's pages and is printed in docs/fleet-cloud.md's scale table.)
func BenchmarkIdleDeviceMemory(b *testing.B) {
	const n = 2000
	for _, mode := range []string{"idle", "sent-once"} {
		for _, tc := range []struct {
			name    string
			queue   int32
			readBuf int
		}{{"mochi-defaults", 8192, 2048}, {"default", 0, 0}} {
			b.Run(mode+"/"+tc.name, func(b *testing.B) {
				for b.Loop() {
					br := startBroker(b, broker.Config{DevAuth: true, ClientQueue: tc.queue, ReadBufferBytes: tc.readBuf})
					m := openManager(b, Config{DataDir: b.TempDir(), Broker: br})
					before := memInUse()
					stop := startBenchDevices(b, br.TCPAddr(), n, mode)
					waitFor(b, "all connected", func() bool { return br.Connected() == n })
					after := memInUse()
					b.ReportMetric(float64(after-before)/n, "bytes/device")
					stop()
					waitFor(b, "all gone", func() bool { return br.Connected() == 0 })
					m.Close()
					br.Close()
				}
			})
		}
	}
}

// memInUse is the heap and goroutine stacks in use after collections. A
// collection halves a goroutine's stack at most once, and only when it
// uses under a quarter of it; the third finds the stacks a device's
// connect or batch grew at their idle size.
func memInUse() int64 {
	for range 3 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// benchDevicesEnv, set to "ADDR N MODE", turns this test binary into N
// rawDevices connected to ADDR (TestMain calls benchDevicesMain).
const benchDevicesEnv = "PHASELESS_BENCH_DEVICES"

// startBenchDevices runs n devices (mode as in BenchmarkIdleDeviceMemory)
// in a child process and returns when all are connected and, for
// "sent-once", acknowledged. stop disconnects them and waits for the child.
func startBenchDevices(b *testing.B, addr string, n int, mode string) (stop func()) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", benchDevicesEnv, addr, n, mode))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop = func() {
		in.Close() // the child's cue to exit
		if err := cmd.Wait(); err != nil {
			b.Errorf("bench devices: %v", err)
		}
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		stop()
		b.Fatalf("bench devices: %q %v", line, err)
	}
	return stop
}

// benchDevicesMain is the child of startBenchDevices: it connects the
// devices, prints "ready", holds them until its stdin closes, and returns
// the exit code.
func benchDevicesMain(spec string) int {
	var addr, mode string
	var n int
	if _, err := fmt.Sscanf(spec, "%s %d %s", &addr, &n, &mode); err != nil {
		fmt.Println("bad", benchDevicesEnv, err)
		return 2
	}
	devs := make([]*rawDevice, n)
	var next atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				d := &rawDevice{id: fmt.Sprintf("idle-%04d", i)}
				devs[i] = d
				if err := benchDevice(d, addr, mode); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, d := range devs {
		d.conn.Close()
	}
	return 0
}

func benchDevice(d *rawDevice, addr, mode string) error {
	if mode == "sent-once" {
		d.will, _ = json.Marshal(fleetwire.Status{DeviceID: d.id, State: "offline", Version: "load-1"})
	}
	if err := d.connect(addr); err != nil {
		return err
	}
	if mode != "sent-once" {
		return nil
	}
	online, _ := json.Marshal(fleetwire.Status{DeviceID: d.id, State: "online", Version: "load-1", Slot: "a", Time: time.Now()})
	pp := packets.NewControlPacket(packets.PUBLISH)
	p := pp.Content.(*packets.Publish)
	p.QoS, p.Retain, p.PacketID, p.Topic, p.Payload = 1, true, 3, topics.Device(d.id, fleetwire.SuffixStatus), online
	if err := d.write(pp); err != nil {
		return err
	}
	return d.uplink(1, 10) // its PUBACK and the status's come before the ack
}
