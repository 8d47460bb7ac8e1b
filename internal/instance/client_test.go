package instance

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/netip"
	"testing"
)

// roundTripper records the hosts it was asked to reach and reaches none.
type roundTripper struct{ hosts []string }

var errNotDialled = errors.New("the test's transport reaches nothing")

func (r *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r.hosts = append(r.hosts, req.URL.Host)
	return nil, errNotDialled
}

// TestClientNeverCallsAnUnreachableAddress: a pod address in the
// unreachable ranges (devcluster's fake nodes) is refused before any
// request is made; any other address is called.
func TestClientNeverCallsAnUnreachableAddress(t *testing.T) {
	rt := &roundTripper{}
	c := &Client{HTTP: &http.Client{Transport: rt}, Unreachable: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	creds := AgentCredentials{TLS: &tls.Config{MinVersion: tls.VersionTLS13}}
	for _, ip := range []string{"10.244.3.7", "::ffff:10.244.0.1"} {
		if _, err := c.Status(context.Background(), ip, creds); !errors.Is(err, ErrUnreachable) {
			t.Errorf("Status(%s) = %v, want ErrUnreachable", ip, err)
		}
		if _, err := c.Apply(context.Background(), ip, creds, Spec{Role: RolePrimary}); !errors.Is(err, ErrUnreachable) {
			t.Errorf("Apply(%s) = %v, want ErrUnreachable", ip, err)
		}
	}
	if len(rt.hosts) != 0 {
		t.Fatalf("requests made to %v", rt.hosts)
	}
	if _, err := c.Status(context.Background(), "10.245.0.12", creds); !errors.Is(err, errNotDialled) {
		t.Errorf("Status(10.245.0.12) = %v, want the transport's error", err)
	}
	if len(rt.hosts) != 1 || rt.hosts[0] != "10.245.0.12:8008" {
		t.Errorf("requests made to %v, want [10.245.0.12:8008]", rt.hosts)
	}
}
