package broker

import (
	"bufio"
	"bytes"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Passwords are the credentials of password-authenticated clients, in the
// format of Mosquitto's password_file (mosquitto_passwd): one
// "username:$7$iterations$salt$hash" line per user (PBKDF2-SHA512), or the
// older "$6$salt$hash" (salted SHA-512). Using Mosquitto's format means one
// file serves the embedded broker and an external Mosquitto alike.
type Passwords struct {
	users map[string]passwordHash
}

type passwordHash struct {
	iterations int // 0 means the $6$ scheme
	salt, hash []byte
}

// pbkdf2Iterations is what mosquitto_passwd 2.0 writes by default, so files
// made here and there verify at the same cost.
const pbkdf2Iterations = 101

// LoadPasswords reads a password file.
func LoadPasswords(path string) (*Passwords, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open password file: %w", err)
	}
	defer f.Close()
	p, err := ParsePasswords(f)
	if err != nil {
		return nil, fmt.Errorf("password file %s: %w", path, err)
	}
	return p, nil
}

// ParsePasswords parses the password file format from r. Blank lines and
// lines starting with # are ignored.
func ParsePasswords(r io.Reader) (*Passwords, error) {
	p := &Passwords{users: map[string]passwordHash{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		user, enc, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("line %d: want username:hash", n)
		}
		h, err := parseHash(enc)
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", n, user, err)
		}
		p.users[user] = h
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

func parseHash(enc string) (passwordHash, error) {
	parts := strings.Split(enc, "$")
	b64 := base64.StdEncoding
	switch {
	case len(parts) == 4 && parts[0] == "" && parts[1] == "6":
		salt, err1 := b64.DecodeString(parts[2])
		hash, err2 := b64.DecodeString(parts[3])
		if err := errors.Join(err1, err2); err != nil || len(hash) != sha512.Size {
			return passwordHash{}, errors.New("bad $6$ hash")
		}
		return passwordHash{salt: salt, hash: hash}, nil
	case len(parts) == 5 && parts[0] == "" && parts[1] == "7":
		it, err := strconv.Atoi(parts[2])
		if err != nil || it < 1 || it > 1_000_000 {
			return passwordHash{}, errors.New("bad $7$ iteration count")
		}
		salt, err1 := b64.DecodeString(parts[3])
		hash, err2 := b64.DecodeString(parts[4])
		if err := errors.Join(err1, err2); err != nil || len(hash) != sha512.Size {
			return passwordHash{}, errors.New("bad $7$ hash")
		}
		return passwordHash{iterations: it, salt: salt, hash: hash}, nil
	}
	return passwordHash{}, errors.New("unsupported hash (want $6$ or $7$ as written by mosquitto_passwd; plain text is refused)")
}

// Verify reports whether password is user's.
func (p *Passwords) Verify(user string, password []byte) bool {
	if p == nil {
		return false
	}
	h, ok := p.users[user]
	if !ok {
		return false
	}
	var got []byte
	if h.iterations == 0 {
		s := sha512.New()
		s.Write(password)
		s.Write(h.salt)
		got = s.Sum(nil)
	} else {
		var err error
		got, err = pbkdf2.Key(sha512.New, string(password), h.salt, h.iterations, sha512.Size)
		if err != nil {
			return false
		}
	}
	return subtle.ConstantTimeCompare(got, h.hash) == 1
}

// Len is the number of users.
func (p *Passwords) Len() int {
	if p == nil {
		return 0
	}
	return len(p.users)
}

// HashPassword returns a password_file line "user:$7$101$salt$hash" that
// both this broker and Mosquitto accept.
func HashPassword(user, password string) (string, error) {
	salt := make([]byte, 12)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	hash, err := pbkdf2.Key(sha512.New, password, salt, pbkdf2Iterations, sha512.Size)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s:$7$%d$%s$%s", user, pbkdf2Iterations,
		base64.StdEncoding.EncodeToString(salt), base64.StdEncoding.EncodeToString(hash))
	return b.String(), nil
}
