package instance

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
)

// ErrStaleTerm is the error of an Apply the agent refused because it has
// seen a higher fencing term than the Spec's (HTTP 409).
var ErrStaleTerm = errors.New("the agent has seen a higher fencing term")

// ErrImpossibleTerm is the error of an Apply the agent refused because the
// Spec's term is one no operator can have sent it (HTTP 400): above
// MaxTerm, or more than MaxTermJump above the highest term it has seen.
var ErrImpossibleTerm = errors.New("the Spec's term is one the operator cannot have sent")

// MaxTerm is the highest fencing term an agent takes. The operator raises
// status.term by one with every change of primary; at one change a second
// it reaches MaxTerm in some 34,000 years. Far below the largest int64, it
// leaves room for term+1 everywhere and survives a round trip through a
// JSON number (exact to 2^53).
const MaxTerm int64 = 1 << 40

// MaxTermJump is how far above the highest term it has seen an agent takes
// a Spec's term. A term grows by one per change of primary, and every
// answering pod is sent every term (a replica Spec naming the new
// primary); only the changes committed while this pod's agent did not
// answer are skipped, and a million of them (at least some 10 seconds
// each: a failover waits for the primary to be unready, a stuck promotion
// for promotionStuckAfter) take months of uninterrupted failovers. An
// agent with no term yet (a new data volume) takes any term up to MaxTerm.
const MaxTermJump int64 = 1 << 20

// Client calls instance agents over HTTPS with a Database's
// AgentCredentials. It is safe for concurrent use.
type Client struct {
	// HTTP makes the requests; its Timeout bounds each call. Its
	// Transport, an *http.Transport or nil, is cloned with each call's TLS
	// configuration (httpClient).
	HTTP *http.Client
	// Unreachable are pod addresses with no agent, never dialled: the
	// pods of a development cluster's fake nodes, whose addresses are
	// not on this machine, and whom no request must reach.
	Unreachable []netip.Prefix
}

// ErrUnreachable is the error of a call to a pod address in
// Client.Unreachable.
var ErrUnreachable = errors.New("no agent at this address: it is in the unreachable pod ranges")

// Status asks the agent at podIP for its Status.
func (c *Client) Status(ctx context.Context, podIP string, creds AgentCredentials) (*Status, error) {
	return c.do(ctx, http.MethodGet, podIP, PathStatus, creds, nil)
}

// Apply sends the agent at podIP its Spec and returns the Status it
// answers with.
func (c *Client) Apply(ctx context.Context, podIP string, creds AgentCredentials, spec Spec) (*Status, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, http.MethodPut, podIP, PathSpec, creds, body)
}

// StartBackup asks the agent at podIP to start a base backup and returns
// its state: Running, or the state of the backup of the same name it
// already ran. A busy agent or one that is not a running primary answers
// 409 (ErrConflict).
func (c *Client) StartBackup(ctx context.Context, podIP string, creds AgentCredentials, req BackupRequest) (*BackupState, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var st BackupState
	if err := c.doJSON(ctx, http.MethodPost, podIP, PathBackup, creds, body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// BackupStatus returns the agent's last base backup; ErrNoBackup when it
// started none since it started.
func (c *Client) BackupStatus(ctx context.Context, podIP string, creds AgentCredentials) (*BackupState, error) {
	var st BackupState
	if err := c.doJSON(ctx, http.MethodGet, podIP, PathBackup, creds, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Retention asks the agent at podIP to apply a recovery window of days and
// returns the backups that remain, oldest first.
func (c *Client) Retention(ctx context.Context, podIP string, creds AgentCredentials, req RetentionRequest) (*RetentionAnswer, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var ans RetentionAnswer
	if err := c.doJSON(ctx, http.MethodPost, podIP, PathRetention, creds, body, &ans); err != nil {
		return nil, err
	}
	return &ans, nil
}

// httpClient is c.HTTP with tlsConfig: an *http.Transport (nil: the
// default one's settings) is cloned with it, without keeping connections,
// since a Database's credentials change when its certificates are renewed;
// another RoundTripper (a test's) is used as it is.
func (c *Client) httpClient(tlsConfig *tls.Config) *http.Client {
	hc := &http.Client{}
	if c.HTTP != nil {
		*hc = *c.HTTP
	}
	var base *http.Transport
	switch t := hc.Transport.(type) {
	case nil:
		base = http.DefaultTransport.(*http.Transport)
	case *http.Transport:
		base = t
	default:
		return hc
	}
	tr := base.Clone()
	tr.TLSClientConfig = tlsConfig
	tr.DisableKeepAlives = true
	hc.Transport = tr
	return hc
}

// send makes one request, with the bearer token when token is not "".
func (c *Client) send(ctx context.Context, hc *http.Client, method, url, token string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return hc.Do(req)
}

// answeredPlainHTTP reports whether err is a TLS handshake the server
// answered in plain HTTP: an earlier release's agent.
func answeredPlainHTTP(err error) bool {
	if errors.Is(err, http.ErrSchemeMismatch) {
		return true
	}
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) && string(rh.RecordHeader[:]) == "HTTP/"
}

// ErrConflict is the error of a call the agent refused for its state (HTTP
// 409): a stale term (also ErrStaleTerm), a server that is not a running
// primary, another backup running.
var ErrConflict = errors.New("the agent refused")

// ErrNoBackup is the error of BackupStatus from an agent that started no
// backup since it started (HTTP 404).
var ErrNoBackup = errors.New("the agent started no base backup since it started")

func (c *Client) do(ctx context.Context, method, podIP, path string, creds AgentCredentials, body []byte) (*Status, error) {
	var s Status
	if err := c.doJSON(ctx, method, podIP, path, creds, body, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func (c *Client) doJSON(ctx context.Context, method, podIP, path string, creds AgentCredentials, body []byte, out any) error {
	if addr, err := netip.ParseAddr(podIP); err == nil {
		for _, p := range c.Unreachable {
			if p.Contains(addr.Unmap()) {
				return fmt.Errorf("%s %s at %s: %w (%s)", method, path, podIP, ErrUnreachable, p)
			}
		}
	}
	if creds.TLS == nil {
		return fmt.Errorf("%s %s at %s: no TLS credentials for the agent", method, path, podIP)
	}
	hc := c.httpClient(creds.TLS)
	host := net.JoinHostPort(podIP, strconv.Itoa(Port))
	resp, err := c.send(ctx, hc, method, "https://"+host+path, "", body)
	if err != nil && creds.LegacyToken != "" && answeredPlainHTTP(err) {
		// An earlier release's agent, which speaks plain HTTP and takes
		// the bearer token: only such an agent gets the token.
		resp, err = c.send(ctx, hc, method, "http://"+host+path, creds.LegacyToken, body)
	}
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusConflict {
		if path == PathSpec || bytes.Contains(data, []byte(ErrStaleTerm.Error())) {
			return fmt.Errorf("%s %s: %w: %s", method, path, ErrStaleTerm, bytes.TrimSpace(data))
		}
		return fmt.Errorf("%s %s: %w: %s", method, path, ErrConflict, bytes.TrimSpace(data))
	}
	if resp.StatusCode == http.StatusBadRequest && path == PathSpec && bytes.Contains(data, []byte(ErrImpossibleTerm.Error())) {
		return fmt.Errorf("%s %s: %w: %s", method, path, ErrImpossibleTerm, bytes.TrimSpace(data))
	}
	if resp.StatusCode == http.StatusNotFound && path == PathBackup {
		return fmt.Errorf("%s %s: %w", method, path, ErrNoBackup)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}
