package leakscan

import (
	"bytes"
	"encoding/base64"
	"sort"
)

// MinLength is the shortest value a Scanner looks for; shorter values (a
// port, a username such as "app") would match by chance.
const MinLength = 8

// Leak is one secret value found in one source. It never holds the value.
type Leak struct {
	// Source names where the value was found, e.g. a log file or an Event.
	Source string
	// Secret names the value, e.g. "shop/orders-credentials password".
	Secret string
	// Encoding is the form the value appeared in: "plain" or "base64".
	Encoding string
}

// Scanner looks for a set of secret values, as they are and base64-encoded
// (the form a Secret's data takes when an object is printed).
type Scanner struct {
	needles []needle
}

type needle struct {
	name, encoding string
	value          []byte
}

// New returns a Scanner for the values of secrets, keyed by a name that says
// what each is. Values shorter than MinLength are ignored.
func New(secrets map[string]string) *Scanner {
	names := make([]string, 0, len(secrets))
	for name := range secrets {
		names = append(names, name)
	}
	sort.Strings(names)
	s := &Scanner{}
	for _, name := range names {
		v := secrets[name]
		if len(v) < MinLength {
			continue
		}
		s.needles = append(s.needles,
			needle{name, "plain", []byte(v)},
			needle{name, "base64", []byte(base64.StdEncoding.EncodeToString([]byte(v)))},
			needle{name, "base64", []byte(base64.RawURLEncoding.EncodeToString([]byte(v)))},
		)
	}
	return s
}

// Len returns how many secret values the Scanner looks for.
func (s *Scanner) Len() int { return len(s.needles) / 3 }

// Scan returns every secret value found in text, once per value and
// encoding, in the order the values were given (sorted by name).
func (s *Scanner) Scan(source string, text []byte) []Leak {
	var leaks []Leak
	seen := map[[2]string]bool{}
	for _, n := range s.needles {
		key := [2]string{n.name, n.encoding}
		if seen[key] || !bytes.Contains(text, n.value) {
			continue
		}
		seen[key] = true
		leaks = append(leaks, Leak{Source: source, Secret: n.name, Encoding: n.encoding})
	}
	return leaks
}

// Redact returns text with every secret value replaced, as it is and
// base64-encoded, by "<redacted: NAME>", and the values it replaced (as
// Scan reports them). Longer values are replaced first, so that a value
// holding another (a uri holding a password) is replaced whole.
func (s *Scanner) Redact(source string, text []byte) ([]byte, []Leak) {
	leaks := s.Scan(source, text)
	if len(leaks) == 0 {
		return text, nil
	}
	needles := make([]needle, len(s.needles))
	copy(needles, s.needles)
	sort.SliceStable(needles, func(i, j int) bool { return len(needles[i].value) > len(needles[j].value) })
	out := text
	for _, n := range needles {
		if bytes.Contains(out, n.value) {
			out = bytes.ReplaceAll(out, n.value, []byte("<redacted: "+n.name+">"))
		}
	}
	return out, leaks
}
