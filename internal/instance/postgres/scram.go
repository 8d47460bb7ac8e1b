package postgres

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The agent never sends a password to the server: it sends the password's
// SCRAM-SHA-256 verifier, which PostgreSQL stores as it is, so that no
// statement, log line, pg_stat_activity row or pg_stat_statements entry
// holds a password, whatever log_statement says.
const (
	// scramIterations is the verifiers' iteration count, PostgreSQL's
	// default (scram_iterations).
	scramIterations = 4096
	// scramSaltLen is the length of a verifier's random salt, PostgreSQL's.
	scramSaltLen = 16
)

// ScramVerifier returns password's SCRAM-SHA-256 verifier, with a random
// salt, in the form pg_authid.rolpassword holds (RFC 5803):
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>.
func ScramVerifier(password string) (string, error) {
	salt := make([]byte, scramSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	return scramVerifier(password, salt, scramIterations)
}

// ScramMatches reports whether verifier, as pg_authid.rolpassword holds
// it, is password's: the keys computed again with its salt and iteration
// count are its own. Anything else (an MD5 hash, a plaintext, no
// password) does not match.
func ScramMatches(verifier, password string) bool {
	iterations, salt, ok := parseScramVerifier(verifier)
	if !ok {
		return false
	}
	again, err := scramVerifier(password, salt, iterations)
	return err == nil && subtle.ConstantTimeCompare([]byte(again), []byte(verifier)) == 1
}

func scramVerifier(password string, salt []byte, iterations int) (string, error) {
	prepared, err := scramPassword(password)
	if err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, prepared, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	server := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(server)), nil
}

// parseScramVerifier reads a verifier's iteration count and salt.
func parseScramVerifier(v string) (iterations int, salt []byte, ok bool) {
	rest, found := strings.CutPrefix(v, "SCRAM-SHA-256$")
	if !found {
		return 0, nil, false
	}
	params, _, found := strings.Cut(rest, "$")
	if !found {
		return 0, nil, false
	}
	iter, saltB64, found := strings.Cut(params, ":")
	if !found {
		return 0, nil, false
	}
	iterations, err := strconv.Atoi(iter)
	if err != nil || iterations <= 0 {
		return 0, nil, false
	}
	salt, err = base64.StdEncoding.DecodeString(saltB64)
	if err != nil || len(salt) == 0 {
		return 0, nil, false
	}
	return iterations, salt, true
}

// errSASLprep is a password whose SASLprep would change it.
var errSASLprep = errors.New("it holds characters that SASLprep (RFC 4013) maps or normalizes " +
	"(a non-ASCII space, a soft hyphen, a variation selector, a character not in Unicode NFKC), " +
	"so the agent cannot compute its SCRAM verifier exactly as PostgreSQL's clients hash it: choose a password without them")

// scramPassword is password as PostgreSQL's SCRAM hashes it, on the server
// and in libpq alike (pg_saslprep): SASLprep's result, or, when the
// password is not valid UTF-8 or SASLprep prohibits it, the password
// itself. The agent computes it exactly or not at all: an ASCII password,
// or one that SASLprep's mapping and NFKC normalization leave unchanged,
// is hashed as it is (SASLprep either returns it unchanged or refuses it,
// and PostgreSQL then hashes it as it is too); any other is refused, since
// whether SASLprep accepts it depends on tables of Unicode 3.2 (prohibited,
// unassigned and bidirectional characters) that Go does not carry.
func scramPassword(password string) (string, error) {
	ascii := true
	for i := range len(password) {
		if password[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii || !utf8.ValidString(password) {
		return password, nil
	}
	for _, r := range password {
		if saslprepMapped(r) {
			return "", errSASLprep
		}
	}
	if !norm.NFKC.IsNormalString(password) {
		return "", errSASLprep
	}
	return password, nil
}

// saslprepMapped reports whether SASLprep maps r: to nothing (RFC 3454
// table B.1) or to a space (a non-ASCII space, table C.1.2).
func saslprepMapped(r rune) bool {
	switch {
	case r == 0x00AD, r == 0x034F, r == 0x1806, r >= 0x180B && r <= 0x180D,
		r >= 0x200B && r <= 0x200D, r == 0x2060, r >= 0xFE00 && r <= 0xFE0F, r == 0xFEFF:
		return true // B.1
	case r == 0x00A0, r == 0x1680, r >= 0x2000 && r <= 0x200B, r == 0x202F, r == 0x205F, r == 0x3000:
		return true // C.1.2
	}
	return false
}
