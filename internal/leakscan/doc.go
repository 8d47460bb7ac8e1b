// Package leakscan finds secret values in text that must never hold them,
// such as a manager's log or the cluster's Events, and removes them. The
// end-to-end and fault tests use it to show that no generated password
// leaves its Secret; kubectl dbkeeper report scrubs its support bundle
// with it.
package leakscan
