package fleet

import (
	"bufio"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/atomicfile"
)

// ErrUnknownArtifact is returned for an artifact id the store does not hold.
var ErrUnknownArtifact = errors.New("unknown artifact")

// maxArtifact bounds an upload; devices bound their download the same way.
const maxArtifact = 1 << 30

// PutArtifact stores a bundle read from r. Its manifest is parsed (and, with
// Config.OTAPub, its signature checked) and every payload checked against
// the manifest's sha256, so a bundle devices would refuse is refused here
// first; storing the same bundle twice returns the same id.
func (m *Manager) PutArtifact(r io.Reader) (*ArtifactInfo, error) {
	dir := filepath.Join(m.cfg.DataDir, "artifacts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := atomicfile.CreateTemp(dir, "upload-*"+atomicfile.TempSuffix, "", 0o600)
	if err != nil {
		return nil, err
	}
	defer tmp.Abort() // after the commit this removes nothing
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, maxArtifact+1))
	if err != nil {
		return nil, fmt.Errorf("store artifact: %w", err)
	}
	if n > maxArtifact {
		return nil, fmt.Errorf("%w: artifact larger than %d bytes", ErrBadRequest, int64(maxArtifact))
	}
	man, err := checkArtifact(tmp.Name(), m.cfg.OTAPub)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	info := &ArtifactInfo{
		ID: hex.EncodeToString(h.Sum(nil)), Kind: man.ArtifactKind(), Version: man.Version, Board: man.Board,
		Size: n, Verified: m.cfg.OTAPub != nil, Stored: m.now(),
	}
	if err := tmp.CommitAs(m.artifactPath(info.ID)); err != nil {
		return nil, err
	}
	return info, m.st.putArtifact(info)
}

// Artifact returns a stored artifact's description.
func (m *Manager) Artifact(id string) (*ArtifactInfo, error) {
	info, err := m.st.artifact(id)
	if err == nil && info == nil {
		err = fmt.Errorf("%w %q", ErrUnknownArtifact, id)
	}
	return info, err
}

func (m *Manager) artifactPath(id string) string { return artifactPath(m.cfg.DataDir, id) }

func artifactPath(dataDir, id string) string {
	return filepath.Join(dataDir, "artifacts", id+".plota")
}

func (m *Manager) artifactURL(id string) string {
	return m.cfg.PublicURL + ArtifactPrefix + id
}

// ArtifactPrefix is where ArtifactHandler serves bundles.
const ArtifactPrefix = "/v1/fleet/artifacts/"

// ArtifactHandler serves GET ArtifactPrefix{id}: the bundle bytes. Devices
// download from it without an API key: a bundle is signed, not secret (each
// device verifies it against the fleet key before installing), and its id is
// its sha256. Mount it outside the admin API's authentication.
func (m *Manager) ArtifactHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ArtifactPrefix+"{id}", func(w http.ResponseWriter, r *http.Request) {
		info, err := m.Artifact(r.PathValue("id"))
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		f, err := os.Open(m.artifactPath(info.ID))
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, info.ID+".plota", info.Stored, f)
	})
	return mux
}

// checkArtifact reads a stored upload through firmware.Check: signature
// (with a key) and every payload's sha256, as a device would before
// installing it.
func checkArtifact(path string, key ed25519.PublicKey) (firmware.Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return firmware.Manifest{}, err
	}
	defer f.Close()
	return firmware.Check(bufio.NewReaderSize(f, 1<<16), key)
}
