package cloud

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/pki"
)

// startFleet starts the embedded broker (or connects to --mqtt-url) and the
// fleet manager on it; neither runs when both are empty.
func (c *Cloud) startFleet() error {
	fc := fleet.Config{DataDir: c.fleetDataDir(), DB: c.cfg.FleetDB, Metrics: c.metrics, Logger: c.log, PublicURL: c.publicURL(),
		Shadow:     c.coord, // the coordinator answers devices' shadow samples
		ArchiveDir: c.cfg.FleetArchiveDir, ArchiveAfter: c.cfg.FleetArchiveAfter, ArchiveMaxBytes: c.cfg.FleetArchiveMaxBytes}
	if c.cfg.OTAPub != "" {
		key, err := firmware.ReadPublicKey(c.cfg.OTAPub)
		if err != nil {
			return &cli.FieldError{Field: "OTAPub", Err: err}
		}
		fc.OTAPub = key
	}
	switch {
	case c.cfg.MQTTURL.IsSet():
		u := *c.cfg.MQTTURL.URL
		ext := &fleet.External{URL: u.String(), DynamicSecurity: c.cfg.MQTTDynsec}
		if c.cfg.FleetDB != "" {
			// Managers side by side need sessions of their own, and a
			// restarted one its old session back (what the broker queued
			// for it): an id stable per replica, its host and URL.
			host, _ := os.Hostname()
			h := sha256.Sum256([]byte(c.publicURL()))
			ext.ClientID = "phaseless-cloud-" + host + "-" + hex.EncodeToString(h[:4])
		}
		if u.User != nil {
			ext.Username = u.User.Username()
			ext.Password, _ = u.User.Password()
			u.User = nil
			ext.URL = u.String()
		}
		fc.External = ext
	case c.cfg.MQTT != "":
		bc := broker.Config{
			TCPAddr: c.cfg.ListenAddr(c.cfg.MQTT), DevAuth: c.cfg.Dev, PasswordFile: c.cfg.MQTTPasswords,
			StorePath: filepath.Join(c.cfg.DataDir, "broker.db"), Metrics: c.metrics, Logger: c.log,
		}
		if c.cfg.MQTTTLS != "" && c.pkiDir != "" {
			tc, err := pki.ServerTLS(c.pkiDir)
			if err != nil {
				return &cli.FieldError{Field: "PKIDir", Err: err}
			}
			bc.TLS, bc.TLSAddr = tc, c.cfg.ListenAddr(c.cfg.MQTTTLS)
		}
		if c.deny != nil {
			if bc.TLS != nil {
				pki.DenyRevoked(bc.TLS, c.deny)
			}
			bc.Revoked = c.deny.Revoked
		}
		if err := os.MkdirAll(c.cfg.DataDir, 0o700); err != nil {
			return &cli.FieldError{Field: "DataDir", Err: err}
		}
		b, err := broker.Start(bc)
		if err != nil {
			return &cli.FieldError{Field: "MQTT", Err: err}
		}
		c.broker = b
		fc.Broker = b
		c.log.Info("embedded MQTT broker listening", "tcp", b.TCPAddr(), "tls", b.TLSAddr())
	default:
		return nil
	}
	if c.cfg.Redis.IsSet() && c.cfg.FleetDB == "" {
		// Replicas sharing Redis share the fleet through one writer
		// (cloud/fleet/lease.go): a second fleet manager refuses to start.
		host, _ := os.Hostname()
		lease, err := fleet.NewRedisLease(c.cfg.Redis.String(), "", host+" "+c.publicURL(), 0)
		if err != nil {
			return &cli.FieldError{Field: "Redis", Err: err}
		}
		fc.Lease = lease
		if c.cfg.FleetStandby {
			return c.startStandby(fc)
		}
	}
	m, err := fleet.Open(fc)
	if err != nil {
		return err
	}
	c.fleet = m
	return nil
}

// publicURL is --public-url, or the bound --http listener on loopback.
func (c *Cloud) publicURL() string {
	if c.cfg.PublicURL.IsSet() {
		return strings.TrimSuffix(c.cfg.PublicURL.String(), "/")
	}
	host, port, _ := net.SplitHostPort(c.httpLn.Addr().String())
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
