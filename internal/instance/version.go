package instance

import "strings"

// serverVersion returns server_version as the server reports it without a
// distribution's suffix: "15.14 (Debian 15.14-0+deb12u1)" is "15.14";
// "17.10" and "18beta1" stay as they are.
func serverVersion(reported string) string {
	v, _, _ := strings.Cut(strings.TrimSpace(reported), " ")
	return v
}

// noteServerVersion records the version a running server reported and
// returns the one to report: the last one seen, so that it is still known
// while the server is down.
func (a *Agent) noteServerVersion(reported string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := serverVersion(reported); v != "" {
		a.serverVersion = v
	}
	return a.serverVersion
}
