package leakscan

import (
	"encoding/base64"
	"testing"
)

func TestScan(t *testing.T) {
	const password = "Zk3pQ9xWm2LrT8vYc4NbH6sJd1FgA5eU"
	s := New(map[string]string{
		"shop/orders-credentials password": password,
		"shop/orders-credentials port":     "5432",
	})
	if s.Len() != 1 {
		t.Fatalf("Len() = %d, want 1: values shorter than MinLength are ignored", s.Len())
	}
	cases := []struct {
		name, text string
		want       []string
	}{
		{"finds nothing in a clean log", `{"level":"info","msg":"applied child","kind":"Secret"}`, nil},
		{"finds the value as it is", `password=` + password + `"`, []string{"plain"}},
		{"finds the value base64-encoded, as in a printed Secret", `"data":{"password":"` + base64.StdEncoding.EncodeToString([]byte(password)) + `"}`, []string{"base64"}},
		{"reports a value once per encoding", password + " " + password, []string{"plain"}},
		{"does not match a short value such as a port", `port 5432`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leaks := s.Scan("manager.log", []byte(c.text))
			if len(leaks) != len(c.want) {
				t.Fatalf("got %+v, want encodings %v", leaks, c.want)
			}
			for i, l := range leaks {
				if l.Encoding != c.want[i] || l.Source != "manager.log" || l.Secret != "shop/orders-credentials password" {
					t.Errorf("leak %d = %+v", i, l)
				}
			}
		})
	}
}

func TestRedact(t *testing.T) {
	const password, key = "Zk3pQ9xWm2LrT8vYc4NbH6sJd1FgA5eU", "AKIAEXAMPLEKEY0001"
	uri := "postgresql://app:" + password + "@orders.shop.svc:5432/app"
	s := New(map[string]string{"orders-credentials password": password, "orders-credentials uri": uri, "store secretAccessKey": key})
	text := "connecting to " + uri + "\nkey " + key + " and " + base64.StdEncoding.EncodeToString([]byte(password)) + "\nport 5432\n"
	out, leaks := s.Redact("pod.log", []byte(text))
	if len(s.Scan("redacted", out)) != 0 {
		t.Errorf("a secret value is left after Redact:\n%s", out)
	}
	want := "connecting to <redacted: orders-credentials uri>\nkey <redacted: store secretAccessKey> and <redacted: orders-credentials password>\nport 5432\n"
	if string(out) != want {
		t.Errorf("Redact =\n%s\nwant\n%s", out, want)
	}
	if len(leaks) != 4 {
		t.Errorf("leaks = %+v, want the password (plain and base64), the uri and the key", leaks)
	}
	if out, leaks := s.Redact("clean.log", []byte("nothing here")); string(out) != "nothing here" || leaks != nil {
		t.Errorf("Redact of a clean text = %q, %+v", out, leaks)
	}
}
