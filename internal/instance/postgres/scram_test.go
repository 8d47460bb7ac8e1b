package postgres

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// TestScramVerifierRFC7677 checks a verifier against the exchange of RFC
// 7677 §3 (user "user", password "pencil"): its ServerKey signs the
// exchange as the server's v= says, and its StoredKey is the hash of the
// ClientKey that the client's proof p= reveals.
func TestScramVerifierRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	v, err := scramVerifier("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(strings.TrimPrefix(v, "SCRAM-SHA-256$"), "$")
	if len(parts) != 2 || parts[0] != "4096:W22ZaJ0SNY7soEsUEjb6gQ==" {
		t.Fatalf("verifier %q", v)
	}
	keys := strings.Split(parts[1], ":")
	stored, _ := base64.StdEncoding.DecodeString(keys[0])
	server, _ := base64.StdEncoding.DecodeString(keys[1])
	const auth = "n=user,r=rOprNGfwEbeRWgbNEkqO," +
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096," +
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	mac := func(key []byte) []byte { h := hmac.New(sha256.New, key); h.Write([]byte(auth)); return h.Sum(nil) }
	if got := base64.StdEncoding.EncodeToString(mac(server)); got != "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" {
		t.Errorf("the server signature is %s, want RFC 7677's", got)
	}
	proof, _ := base64.StdEncoding.DecodeString("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
	sig := mac(stored)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ sig[i]
	}
	if h := sha256.Sum256(clientKey); string(h[:]) != string(stored) {
		t.Error("the StoredKey is not the hash of the ClientKey RFC 7677's proof reveals")
	}
}

func TestScramMatches(t *testing.T) {
	v, err := ScramVerifier("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ScramVerifier("s3cret")
	if v == again {
		t.Error("two verifiers of a password share their salt")
	}
	for _, c := range []struct {
		verifier, password string
		want               bool
	}{
		{v, "s3cret", true},
		{again, "s3cret", true},
		{v, "s3cret ", false},
		{v, "", false},
		{"md5" + strings.Repeat("0", 32), "s3cret", false},
		{"s3cret", "s3cret", false},
		{"SCRAM-SHA-256$x:c2FsdA==$a:b", "s3cret", false},
		{"", "", false},
	} {
		if got := ScramMatches(c.verifier, c.password); got != c.want {
			t.Errorf("ScramMatches(%q, %q) = %v, want %v", c.verifier, c.password, got, c.want)
		}
	}
}

// TestScramPassword: what PostgreSQL hashes as it is, is hashed as it is;
// a password SASLprep would change is refused, with no password in the
// error.
func TestScramPassword(t *testing.T) {
	for _, p := range []string{"plain", `quo'te\back:slash`, "ctrl\x01char", "caf\u00e9 \u00fcber", "\u043f\u0430\u0440\u043e\u043b\u044c", "bad\xffutf8"} {
		if got, err := scramPassword(p); err != nil || got != p {
			t.Errorf("scramPassword(%q) = %q, %v; want it unchanged", p, got, err)
		}
	}
	for _, p := range []string{"no\u00a0break", "soft\u00adhyphen", "\ufb01ligature", "cafe\u0301"} {
		_, err := scramPassword(p)
		if !errors.Is(err, errSASLprep) {
			t.Errorf("scramPassword(%q): %v, want errSASLprep", p, err)
		}
		if _, err := ScramVerifier(p); err == nil || strings.Contains(err.Error(), p) {
			t.Errorf("ScramVerifier(%q): %v, want an error without the password", p, err)
		}
	}
}
