package pki

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// RevokedFile, in the PKI directory, is the fleet's deny list: one revoked
// device per line, `id serial revoked-at [reason...]` (serial in hex, "-"
// when the certificate was not at hand; time in RFC 3339), # comments. It is
// a deny list rather than an X.509 CRL because the cloud identifies devices
// by id on both QUIC and MQTT (password devices have no certificate), and a
// stolen car must lose every certificate ever issued for its id.
// phaselessctl pki revoke appends to it; the cloud watches it.
const RevokedFile = "revoked.txt"

// DefaultWatchInterval is how often the cloud rereads the deny list: a
// revocation takes effect within it.
const DefaultWatchInterval = time.Second

// maxRevokedBytes bounds the file the cloud reads (a million devices fit).
const maxRevokedBytes = 64 << 20

// Revocation is one line of the deny list.
type Revocation struct {
	ID     string
	Serial string // hex, or "-"
	At     time.Time
	Reason string
}

// ParseRevocations reads a deny list. A malformed line is an error naming
// it: a cloud must not half-read the list and readmit a stolen car.
func ParseRevocations(r io.Reader) ([]Revocation, error) {
	var out []Revocation
	sc := bufio.NewScanner(io.LimitReader(r, maxRevokedBytes))
	sc.Buffer(make([]byte, 0, 256), 4096)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("%s line %d: want `id serial revoked-at [reason]`", RevokedFile, n)
		}
		if err := fleetwire.ValidateDeviceID(f[0]); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", RevokedFile, n, err)
		}
		if f[1] != "-" && strings.Trim(strings.ToLower(f[1]), "0123456789abcdef") != "" {
			return nil, fmt.Errorf("%s line %d: serial %q is not hex", RevokedFile, n, f[1])
		}
		at, err := time.Parse(time.RFC3339, f[2])
		if err != nil {
			return nil, fmt.Errorf("%s line %d: time: %w", RevokedFile, n, err)
		}
		if at.IsZero() { // what an unset time.Time prints: no revocation was made then
			return nil, fmt.Errorf("%s line %d: time %s is the zero time", RevokedFile, n, f[2])
		}
		out = append(out, Revocation{ID: f[0], Serial: strings.ToLower(f[1]), At: at, Reason: strings.Join(f[3:], " ")})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", RevokedFile, err)
	}
	return out, nil
}

// ErrAlreadyRevoked is returned by Revoke for a device already on the list.
var ErrAlreadyRevoked = errors.New("already revoked")

// Revoke adds device id to dir's deny list, with the serial of its
// certificate in dir when there is one. The file is rewritten through a
// temporary file and a rename, so the cloud never reads half of it.
func Revoke(dir, id, reason string, now time.Time) (Revocation, error) {
	if err := fleetwire.ValidateDeviceID(id); err != nil {
		return Revocation{}, fmt.Errorf("pki revoke: %w", err)
	}
	reason = strings.Join(strings.Fields(reason), " ") // one line
	path := filepath.Join(dir, RevokedFile)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Revocation{}, fmt.Errorf("pki revoke: %w", err)
	}
	list, err := ParseRevocations(bytes.NewReader(old))
	if err != nil {
		return Revocation{}, fmt.Errorf("pki revoke: %w", err)
	}
	for _, r := range list {
		if r.ID == id {
			return r, fmt.Errorf("pki revoke: device %s: %w (since %s)", id, ErrAlreadyRevoked, r.At.Format(time.RFC3339))
		}
	}
	rev := Revocation{ID: id, Serial: "-", At: now.UTC().Truncate(time.Second), Reason: reason}
	if b, err := os.ReadFile(filepath.Join(dir, DeviceCertFile(id))); err == nil {
		if blk, _ := pem.Decode(b); blk != nil {
			if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
				rev.Serial = c.SerialNumber.Text(16)
			}
		}
	}
	var buf bytes.Buffer
	if len(old) == 0 {
		buf.WriteString("# Revoked devices: id serial revoked-at reason (phaselessctl pki revoke). The cloud reloads this file by itself.\n")
	}
	buf.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		buf.WriteByte('\n')
	}
	fmt.Fprintf(&buf, "%s %s %s %s\n", rev.ID, rev.Serial, rev.At.Format(time.RFC3339), rev.Reason)
	if err := writeFile(path, buf.Bytes(), 0o644); err != nil {
		return Revocation{}, err
	}
	return rev, nil
}

// DenyList is the cloud's view of the deny list in a PKI directory, kept
// current by Watch. The zero value denies nobody. Safe for concurrent use.
type DenyList struct {
	path string

	mu      sync.RWMutex // guards ids, modTime, size
	ids     map[string]bool
	modTime time.Time
	size    int64
}

// LoadDenyList reads dir's deny list (none is an empty list).
func LoadDenyList(dir string) (*DenyList, error) {
	d := &DenyList{path: filepath.Join(dir, RevokedFile), ids: map[string]bool{}}
	if _, err := d.Reload(); err != nil {
		return nil, err
	}
	return d, nil
}

// Revoked reports whether device id is on the list.
func (d *DenyList) Revoked(id string) bool {
	if d == nil {
		return false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.ids[id]
}

// IDs returns every device on the list, sorted.
func (d *DenyList) IDs() []string {
	if d == nil {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Sorted(maps.Keys(d.ids))
}

// Reload rereads the file if its size or modification time changed and
// returns the ids added since the last read. On a read or parse error the
// previous list stays in force (a bad edit must not readmit anyone).
func (d *DenyList) Reload() (added []string, err error) {
	st, err := os.Stat(d.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st = nil
	case err != nil:
		return nil, fmt.Errorf("deny list: %w", err)
	}
	d.mu.RLock()
	unchanged := st != nil && st.ModTime().Equal(d.modTime) && st.Size() == d.size || st == nil && d.size == 0 && d.modTime.IsZero()
	d.mu.RUnlock()
	if unchanged {
		return nil, nil
	}
	ids := map[string]bool{}
	var modTime time.Time
	var size int64
	if st != nil {
		f, err := os.Open(d.path)
		if err != nil {
			return nil, fmt.Errorf("deny list: %w", err)
		}
		list, err := ParseRevocations(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("deny list: %w", err)
		}
		for _, r := range list {
			ids[r.ID] = true
		}
		modTime, size = st.ModTime(), st.Size()
	}
	d.mu.Lock()
	for id := range ids {
		if !d.ids[id] {
			added = append(added, id)
		}
	}
	d.ids, d.modTime, d.size = ids, modTime, size
	d.mu.Unlock()
	sort.Strings(added)
	return added, nil
}

// Watch rereads the file every interval until ctx ends and calls onRevoke
// with the devices newly on it (the cloud closes their connections), and
// onError with a failed reread (the old list stays in force). A poll rather
// than inotify: it works on every filesystem a PKI directory may live on
// (NFS, a mounted secret), at the cost of up to one interval's delay.
func (d *DenyList) Watch(ctx context.Context, interval time.Duration, onRevoke func(ids []string), onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		added, err := d.Reload()
		if err != nil {
			if onError != nil {
				onError(err)
			}
			continue
		}
		if len(added) > 0 {
			onRevoke(added)
		}
	}
}

// ErrRevoked is the handshake error of a device on the deny list.
var ErrRevoked = errors.New("device certificate revoked")

// DenyRevoked makes tc refuse, at the TLS handshake, a client whose device
// id is on d; it keeps tc's own VerifyConnection check. Call it on a
// ServerTLS configuration before handing it to a listener.
func DenyRevoked(tc *tls.Config, d *DenyList) {
	prev := tc.VerifyConnection
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return nil // the listener's ClientAuth decides about no certificate
		}
		if id := cs.PeerCertificates[0].Subject.CommonName; d.Revoked(id) {
			return fmt.Errorf("pki: device %s: %w", id, ErrRevoked)
		}
		return nil
	}
}
