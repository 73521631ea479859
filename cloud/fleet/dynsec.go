package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Mosquitto's dynamic security plugin (mosquitto_dynamic_security.so) is
// administered over MQTT: JSON commands published to dynsecTopic, answers
// on dynsecResponse. An external Mosquitto running it lets the cloud refuse
// a revoked device at the broker the moment it is revoked: disableClient
// stops the username from logging in and kicks its open connections, which
// a password or ACL file cannot do without a restart or SIGHUP on the
// broker's host.
const (
	dynsecTopic    = "$CONTROL/dynamic-security/v1"
	dynsecResponse = dynsecTopic + "/response"
)

// DynsecCommand is one dynamic-security command. Fields beyond Command are
// the command's own (username, password, rolename, acltype, topic, ...).
type DynsecCommand map[string]any

// ErrNoDynsec is returned by RevokeOnBroker when the Manager has no
// external broker with the dynamic security plugin to tell.
var ErrNoDynsec = errors.New("fleet: no external broker with dynamic security configured")

// RevokeOnBroker disables device id on the external Mosquitto (dynamic
// security disableClient: the broker closes its connections and refuses it
// from then on; the device's username is its id). With the embedded broker
// the cloud refuses revoked devices itself, and this returns ErrNoDynsec.
func (m *Manager) RevokeOnBroker(ctx context.Context, id string) error {
	e := m.cfg.External
	if e == nil || !e.DynamicSecurity {
		return ErrNoDynsec
	}
	return RunDynsec(ctx, e, DynsecCommand{"command": "disableClient", "username": id})
}

// DynsecFleetSetup is the dynamic-security commands that set a fleet up on
// a Mosquitto whose plugin knows only its admin: role "fleet" (every topic
// under prefix), role "device" (the fleet-wide announcements), the cloud's
// user with the plugin's admin role and "fleet", and one client per device
// with role "device" and a role "device-{id}" of its own (publishing only its
// protocol topics, reading its own dev/{id}/ subtree: the fleet ACL of
// DESIGN.md §4); a device's username is its id.
func DynsecFleetSetup(prefix, cloudUser, cloudPassword string, devices map[string]string) []DynsecCommand {
	acl := func(kind, topic string) map[string]any {
		return map[string]any{"acltype": kind, "topic": topic, "allow": true}
	}
	all, fleetWide := prefix+"#", prefix+"fleet/#"
	role := func(name string) map[string]any { return map[string]any{"rolename": name} }
	cmds := []DynsecCommand{
		{"command": "createRole", "rolename": "fleet", "acls": []any{
			acl("publishClientSend", all), acl("publishClientReceive", all), acl("subscribePattern", all)}},
		{"command": "createRole", "rolename": "device", "acls": []any{
			acl("publishClientReceive", fleetWide), acl("subscribePattern", fleetWide)}},
		{"command": "createClient", "username": cloudUser, "password": cloudPassword, "roles": []any{role("admin"), role("fleet")}},
	}
	// The plugin (Mosquitto 2.0) has no %u or %c in ACL topics (upstream
	// issue eclipse-mosquitto/mosquitto#2784), so each device gets a role
	// of its own naming its topics: it publishes only those the protocol
	// has it write (fleetwire.DeviceWrites) and reads its own subtree. The
	// plugin has no per-topic size or retain rule; the broker's global
	// max_packet_size is the only size limit (docs/security.md, "Broker ACL").
	for _, id := range slices.Sorted(maps.Keys(devices)) {
		own := prefix + "dev/" + id + "/"
		acls := []any{acl("publishClientReceive", own+"#"), acl("subscribePattern", own+"#")}
		for _, w := range fleetwire.DeviceWrites {
			acls = append(acls, acl("publishClientSend", own+w.Suffix))
		}
		cmds = append(cmds,
			DynsecCommand{"command": "createRole", "rolename": "device-" + id, "acls": acls},
			DynsecCommand{"command": "createClient", "username": id, "password": devices[id], "roles": []any{role("device"), role("device-" + id)}})
	}
	return cmds
}

// RunDynsec sends commands to the dynamic security plugin of the broker e
// names, as e's user (which needs the plugin's admin role), over a short
// connection of its own, and waits for every answer. It fails with the
// plugin's error text for a command it refused.
func RunDynsec(ctx context.Context, e *External, cmds ...DynsecCommand) error {
	if len(cmds) == 0 {
		return nil
	}
	u, err := url.Parse(e.URL)
	if err != nil {
		return fmt.Errorf("dynamic security: broker URL: %w", err)
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	corr := hex.EncodeToString(nonce[:])
	for i := range cmds {
		c := DynsecCommand{"correlationData": fmt.Sprintf("%s-%d", corr, i)}
		for k, v := range cmds[i] {
			c[k] = v
		}
		cmds[i] = c
	}
	body, err := json.Marshal(map[string]any{"commands": cmds})
	if err != nil {
		return err
	}
	answers := make(chan []byte, 16)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		TlsCfg:                        e.TLS,
		KeepAlive:                     30,
		CleanStartOnInitialConnection: true,
		ConnectTimeout:                10 * time.Second,
		ConnectUsername:               e.Username,
		ConnectPassword:               []byte(e.Password),
		ClientConfig: paho.ClientConfig{
			// Its own id: the Manager's session must not be taken over.
			ClientID: e.clientID() + "-dynsec-" + corr,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				if pr.Packet.Topic == dynsecResponse {
					select {
					case answers <- pr.Packet.Payload:
					default:
					}
				}
				return true, nil
			}},
		},
	})
	if err != nil {
		return fmt.Errorf("dynamic security: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		_ = cm.Disconnect(dctx)
		<-cm.Done()
	}()
	if err := cm.AwaitConnection(ctx); err != nil {
		return fmt.Errorf("dynamic security: connect to %s: %w", u.Host, err)
	}
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: dynsecResponse, QoS: 1}}}); err != nil {
		return fmt.Errorf("dynamic security: subscribe %s: %w", dynsecResponse, err)
	}
	if _, err := cm.Publish(ctx, &paho.Publish{QoS: 1, Topic: dynsecTopic, Payload: body}); err != nil {
		return fmt.Errorf("dynamic security: publish: %w", err)
	}
	pending := len(cmds)
	var errs []error
	for pending > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("dynamic security: %d of %d commands unanswered: %w", pending, len(cmds), ctx.Err())
		case b := <-answers:
			rs, err := parseDynsecResponse(b)
			if err != nil {
				return fmt.Errorf("dynamic security: %w", err)
			}
			for _, r := range rs {
				if len(r.Correlation) <= len(corr) || r.Correlation[:len(corr)] != corr {
					continue // another admin's answer
				}
				pending--
				if r.Error != "" {
					errs = append(errs, fmt.Errorf("dynamic security %s: %s", r.Command, r.Error))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// clientID is the Manager's client id, defaulted as fillDefaults does.
func (e *External) clientID() string {
	if e.ClientID == "" {
		return "phaseless-cloud"
	}
	return e.ClientID
}

// dynsecAnswer is one entry of the plugin's response.
type dynsecAnswer struct {
	Command     string `json:"command"`
	Error       string `json:"error"`
	Correlation string `json:"correlationData"`
}

// parseDynsecResponse decodes a response payload from the broker.
func parseDynsecResponse(b []byte) ([]dynsecAnswer, error) {
	var r struct {
		Responses []dynsecAnswer `json:"responses"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("bad response %.200q: %v", b, err)
	}
	return r.Responses, nil
}
