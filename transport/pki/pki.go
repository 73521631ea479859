// Package pki is the fleet's public-key infrastructure: one fleet CA, a
// server certificate for the cloud, and one client certificate per device
// whose common name is the device id. It writes and reads PEM files in one
// directory and builds the mutual-TLS configurations that the QUIC uplink and
// the MQTT broker share, so a device is known by the same identity on both.
//
// Files in the directory (keys are written 0600):
//
//	ca.pem, ca-key.pem                 fleet CA (phaselessctl pki init)
//	server.pem, server-key.pem         cloud server certificate
//	device-<id>.pem, device-<id>-key.pem  one device (phaselessctl pki device)
//	revoked.txt                        revoked devices (phaselessctl pki revoke; revoke.go)
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/phaseless/phaseless/internal/atomicfile"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// File names inside a PKI directory.
const (
	CACertFile     = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
)

// DeviceCertFile and DeviceKeyFile name a device's certificate and key.
func DeviceCertFile(id string) string { return "device-" + id + ".pem" }

// DeviceKeyFile names a device's private key file.
func DeviceKeyFile(id string) string { return "device-" + id + "-key.pem" }

// Validity periods. The CA outlives every certificate it signs; leaf
// certificates stay under the 825 days that common TLS clients accept.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 825 * 24 * time.Hour
	// clockSkew backdates NotBefore so a device whose clock runs a little
	// behind (no RTC until NTP answers) still accepts a fresh certificate.
	clockSkew = time.Hour
)

// ErrExists is returned instead of overwriting a CA or a device certificate:
// replacing a CA silently would lock every enrolled device out.
var ErrExists = errors.New("already exists")

// defaultHosts are always in the server certificate so a one-machine setup
// (make demo, tests) works without flags.
var defaultHosts = []string{"localhost", "127.0.0.1", "::1"}

// Init creates a fleet CA and a server certificate valid for localhost,
// 127.0.0.1, ::1 and hosts (names or IP addresses) in dir. It refuses to
// overwrite an existing CA.
func Init(dir string, hosts []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki init: %w", err)
	}
	for _, f := range []string{CACertFile, CAKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("pki init: %s: %w (remove the directory to start a new fleet)", filepath.Join(dir, f), ErrExists)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki init: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Phaseless fleet CA", Organization: []string{"Phaseless"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // the CA signs leaves only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("pki init: CA certificate: %w", err)
	}
	// Key first: a crash between the two writes leaves no ca.pem without its key.
	if err := writeKey(filepath.Join(dir, CAKeyFile), caKey); err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, CACertFile), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return issueServer(dir, hosts)
}

// ServerHosts is every name and address the server certificate that Init
// issues for hosts is valid for: the loopback names first, then hosts, each
// once.
func ServerHosts(hosts []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, h := range append(append([]string(nil), defaultHosts...), hosts...) {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		out = append(out, h)
	}
	return out
}

// issueServer (re)writes the server certificate signed by the CA in dir.
func issueServer(dir string, hosts []string) error {
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	tmpl := leafTemplate("phaseless-cloud", x509.ExtKeyUsageServerAuth)
	for _, h := range ServerHosts(hosts) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return issueLeaf(dir, ServerCertFile, ServerKeyFile, tmpl, ca, caKey)
}

// IssueDevice issues a client certificate for device id (CN = id), signed by
// the CA in dir. It refuses to overwrite an existing certificate for id.
func IssueDevice(dir, id string) error {
	if err := fleetwire.ValidateDeviceID(id); err != nil {
		return fmt.Errorf("pki device: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, DeviceCertFile(id))); err == nil {
		return fmt.Errorf("pki device: %s: %w", filepath.Join(dir, DeviceCertFile(id)), ErrExists)
	}
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return fmt.Errorf("pki device: %w (run phaselessctl pki init first)", err)
	}
	return issueLeaf(dir, DeviceCertFile(id), DeviceKeyFile(id), leafTemplate(id, x509.ExtKeyUsageClientAuth), ca, caKey)
}

// EnsureDev makes dir usable for development: it creates the CA and server
// certificate when absent and a certificate for each device id that has
// none. Existing files are kept, so repeated runs agree with each other.
func EnsureDev(dir string, deviceIDs ...string) error {
	_, caErr := os.Stat(filepath.Join(dir, CACertFile))
	switch {
	case errors.Is(caErr, fs.ErrNotExist):
		if err := Init(dir, nil); err != nil {
			return err
		}
	case caErr != nil:
		return fmt.Errorf("pki: %w", caErr)
	default:
		if _, err := os.Stat(filepath.Join(dir, ServerCertFile)); errors.Is(err, fs.ErrNotExist) {
			if err := issueServer(dir, nil); err != nil {
				return err
			}
		}
	}
	for _, id := range deviceIDs {
		if _, err := os.Stat(filepath.Join(dir, DeviceCertFile(id))); err == nil {
			continue
		}
		if err := IssueDevice(dir, id); err != nil {
			return err
		}
	}
	return nil
}

// ServerTLS is the cloud's TLS configuration: the server certificate, and
// client certificates required and verified against the fleet CA, with a
// common name that is a valid device id. It sets no ALPN; each protocol adds
// its own.
func ServerTLS(dir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		return nil, fmt.Errorf("pki: server certificate: %w", err)
	}
	pool, err := loadPool(dir)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		// Refuse at the handshake a certificate whose CN cannot be a device
		// id, rather than failing later on each request.
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := DeviceIDFromState(cs)
			return err
		},
	}, nil
}

// DeviceTLS is device id's TLS configuration: its client certificate and the
// fleet CA as the only trusted root. It sets no ALPN and no server name.
func DeviceTLS(dir, id string) (*tls.Config, error) {
	if err := fleetwire.ValidateDeviceID(id); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, DeviceCertFile(id)), filepath.Join(dir, DeviceKeyFile(id)))
	if err != nil {
		return nil, fmt.Errorf("pki: device %s certificate: %w (phaselessctl pki device --dir %s --id %s)", id, err, dir, id)
	}
	pool, err := loadPool(dir)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
	}, nil
}

// DeviceIDFromState returns the device id of a verified client certificate:
// its common name.
func DeviceIDFromState(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("pki: no client certificate")
	}
	id := cs.PeerCertificates[0].Subject.CommonName
	if err := fleetwire.ValidateDeviceID(id); err != nil {
		return "", fmt.Errorf("pki: client certificate common name: %w", err)
	}
	return id, nil
}

func leafTemplate(cn string, usage x509.ExtKeyUsage) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"Phaseless"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
}

func issueLeaf(dir, certFile, keyFile string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: key for %s: %w", tmpl.Subject.CommonName, err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("pki: certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writeKey(filepath.Join(dir, keyFile), key); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, certFile), "CERTIFICATE", der, 0o644)
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("load fleet CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("load fleet CA: key is %T, want ECDSA", pair.PrivateKey)
	}
	return pair.Leaf, key, nil
}

func loadPool(dir string) (*x509.CertPool, error) {
	b, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("pki: fleet CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("pki: %s holds no certificate", filepath.Join(dir, CACertFile))
	}
	return pool, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: encode key: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM writes a PEM block with writeFile.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// writeFile writes whole or not at all (internal/atomicfile), so a reader
// never sees half a key, and the key is never readable by others even
// briefly: the temporary file has mode from the start.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := atomicfile.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("crypto/rand failed: " + err.Error()) // crypto/rand never fails on supported platforms
	}
	return n
}
