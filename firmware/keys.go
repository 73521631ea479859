package firmware

import (
	"crypto/ed25519"
	"encoding/pem"
	"fmt"
	"os"
)

// PEM block types of the fleet's OTA signing key pair (phaselessctl ota keygen).
const (
	PrivateKeyPEMType = "PHASELESS OTA PRIVATE KEY" // the ed25519 seed
	PublicKeyPEMType  = "PHASELESS OTA PUBLIC KEY"
)

// ReadPublicKey reads the trusted public key a device verifies bundles with.
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := readPEM(path, PublicKeyPEMType, ed25519.PublicKeySize)
	return ed25519.PublicKey(b), err
}

// ReadPrivateKey reads the fleet's signing key.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	seed, err := readPEM(path, PrivateKeyPEMType, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func readPEM(path, typ string, size int) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != typ || len(b.Bytes) != size {
		return nil, fmt.Errorf("%s: not a %s", path, typ)
	}
	return b.Bytes, nil
}
