package instance

import (
	"bytes"
	"context"
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

// Client calls instance agents. It is safe for concurrent use.
type Client struct {
	// HTTP makes the requests; its Timeout bounds each call.
	HTTP *http.Client
	// Unreachable are pod addresses with no agent, never dialled: the
	// pods of a development cluster's fake nodes, whose addresses are
	// not on this machine, and whom the agent's token must not reach.
	Unreachable []netip.Prefix
}

// ErrUnreachable is the error of a call to a pod address in
// Client.Unreachable.
var ErrUnreachable = errors.New("no agent at this address: it is in the unreachable pod ranges")

// Status asks the agent at podIP for its Status.
func (c *Client) Status(ctx context.Context, podIP, token string) (*Status, error) {
	return c.do(ctx, http.MethodGet, podIP, PathStatus, token, nil)
}

// Apply sends the agent at podIP its Spec and returns the Status it
// answers with.
func (c *Client) Apply(ctx context.Context, podIP, token string, spec Spec) (*Status, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, http.MethodPut, podIP, PathSpec, token, body)
}

func (c *Client) do(ctx context.Context, method, podIP, path, token string, body []byte) (*Status, error) {
	if addr, err := netip.ParseAddr(podIP); err == nil {
		for _, p := range c.Unreachable {
			if p.Contains(addr.Unmap()) {
				return nil, fmt.Errorf("%s %s at %s: %w (%s)", method, path, podIP, ErrUnreachable, p)
			}
		}
	}
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(Port)) + path
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusConflict {
		return nil, fmt.Errorf("%s %s: %w: %s", method, path, ErrStaleTerm, bytes.TrimSpace(data))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return &s, nil
}
