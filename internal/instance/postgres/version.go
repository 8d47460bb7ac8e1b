package postgres

import "strings"

// ServerVersion returns server_version as the server reports it without a
// distribution's suffix: "15.14 (Debian 15.14-0+deb12u1)" is "15.14";
// "17.10" and "18beta1" stay as they are.
func ServerVersion(reported string) string {
	v, _, _ := strings.Cut(strings.TrimSpace(reported), " ")
	return v
}
