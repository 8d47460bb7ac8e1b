// Package leakscan finds secret values in text that must never hold them,
// such as a manager's log or the cluster's Events. The end-to-end and fault
// tests use it to show that no generated password leaves its Secret.
package leakscan
