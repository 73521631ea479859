package fleet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/internal/mosquittotest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestRevokeOnMosquitto: with an external Mosquitto running the dynamic
// security plugin, revoking a device disables it there: the broker closes
// the device's open connection at once and refuses it afterwards, while
// other devices stay connected.
func TestRevokeOnMosquitto(t *testing.T) {
	const admin, adminPw = "dynsec-admin", "admin-pw-1"
	brokerURL := mosquittotest.StartDynsec(t, admin, adminPw)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The cloud's user: the plugin's admin role (to revoke) and the fleet
	// topics (to manage); devices may use their own subtree.
	setup := &External{URL: brokerURL, Username: admin, Password: adminPw}
	if err := RunDynsec(ctx, setup, DynsecFleetSetup("phaseless/", "phaseless-cloud", "cloud-pw-1", map[string]string{"car-9": "pw-car-9", "car-10": "pw-car-10"})...); err != nil {
		t.Fatal(err)
	}
	if err := RunDynsec(ctx, setup, DynsecCommand{"command": "createClient", "username": "car-9", "password": "x"}); err == nil {
		t.Fatal("the plugin's refusal (client exists) was not reported")
	}
	stolen, err := mosquittotest.Connect(t, brokerURL, "car-9", "pw-car-9")
	if err != nil {
		t.Fatal(err)
	}
	other, err := mosquittotest.Connect(t, brokerURL, "car-10", "pw-car-10")
	if err != nil {
		t.Fatal(err)
	}

	m := openManager(t, Config{DataDir: t.TempDir(), External: &External{URL: brokerURL, Username: "phaseless-cloud", Password: "cloud-pw-1", ClientID: "phaseless-cloud-test", DynamicSecurity: true}})
	waitFor(t, "manager connected", func() bool { return m.Ready() == nil })
	if err := m.RevokeOnBroker(ctx, "car-9"); err != nil {
		t.Fatal(err)
	}
	select { // the broker kicks it as part of disableClient: no polling interval
	case <-stolen.Gone:
	case <-ctx.Done():
		t.Fatal("the revoked device's connection is still open")
	}
	if _, err := mosquittotest.Connect(t, brokerURL, "car-9", "pw-car-9"); err == nil {
		t.Fatal("the revoked device logged in again")
	}
	select {
	case <-other.Gone:
		t.Fatal("another device was disconnected")
	default:
	}
	if _, err := mosquittotest.Connect(t, brokerURL, "car-10", "pw-car-10"); err != nil {
		t.Fatalf("another device refused: %v", err)
	}
	plain := &Manager{cfg: Config{External: &External{URL: brokerURL}}} // an external broker without the plugin
	if err := plain.RevokeOnBroker(ctx, "car-9"); !errors.Is(err, ErrNoDynsec) {
		t.Fatalf("manager without dynamic security: %v", err)
	}
}

// TestDynsecDeviceWrites: the device role publishes only the topics of
// fleetwire.DeviceWrites on a real Mosquitto with the plugin.
func TestDynsecDeviceWrites(t *testing.T) {
	const admin, adminPw = "dynsec-admin", "admin-pw-1"
	brokerURL := mosquittotest.StartDynsec(t, admin, adminPw)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	setup := &External{URL: brokerURL, Username: admin, Password: adminPw}
	if err := RunDynsec(ctx, setup, DynsecFleetSetup("phaseless/", "phaseless-cloud", "cloud-pw-1", map[string]string{"car-9": "pw-car-9"})...); err != nil {
		t.Fatal(err)
	}
	cloud, err := mosquittotest.Connect(t, brokerURL, "phaseless-cloud", "cloud-pw-1")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // guards got
	var got []string
	arrived := make(chan struct{}, 64)
	cloud.Client().AddOnPublishReceived(func(pr paho.PublishReceived) (bool, error) {
		mu.Lock()
		got = append(got, pr.Packet.Topic)
		mu.Unlock()
		arrived <- struct{}{}
		return true, nil
	})
	if _, err := cloud.Client().Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "phaseless/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	dev, err := mosquittotest.Connect(t, brokerURL, "car-9", "pw-car-9")
	if err != nil {
		t.Fatal(err)
	}
	tp := fleetwire.Topics{}
	for _, topic := range []string{tp.Device("car-9", "junk"), tp.Device("car-9", fleetwire.SuffixCmd), tp.Device("car-9", fleetwire.SuffixConfigDesired), tp.Device("car-8", fleetwire.SuffixStatus)} {
		_, _ = dev.Client().Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte("refused"), Retain: true})
	}
	var want []string
	for _, w := range fleetwire.DeviceWrites {
		want = append(want, tp.Device("car-9", w.Suffix))
		if _, err := dev.Client().Publish(ctx, &paho.Publish{QoS: 1, Topic: want[len(want)-1], Payload: []byte("ok")}); err != nil {
			t.Fatalf("%s: %v", want[len(want)-1], err)
		}
	}
	// One connection's messages keep their order: a refused one delivered
	// would arrive before the last allowed one.
	for range want {
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatal("the allowed publishes did not all arrive")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("the cloud got %v, want %v", got, want)
	}
}

// FuzzDynsecResponse: the broker's answers are outside bytes.
func FuzzDynsecResponse(f *testing.F) {
	f.Add([]byte(`{"responses":[{"command":"disableClient","correlationData":"ab-0"}]}`))
	f.Add([]byte(`{"responses":[{"command":"createClient","error":"Client already exists"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := parseDynsecResponse(b)
		if err != nil && rs != nil {
			t.Fatalf("answers %v with error %v", rs, err)
		}
	})
}
