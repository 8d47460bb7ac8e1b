package agent

import (
	"fmt"
	"net/netip"
	"strings"
)

// UpstreamAllowed returns why the agent of pod podName in namespace must
// not stream from or clone upstream, nil when it may. An upstream must be
// a pod of the agent's own Database, <db>-<ordinal> where the agent's pod
// is <db>-<n>, by its DNS name under the Database's headless Service in
// the agent's namespace:
//
//	<db>-<k>.<db>-headless.<namespace>.svc
//	<db>-<k>.<db>-headless.<namespace>.svc.cluster.local
//
// Shorter forms are refused: a name the resolver completes through its
// search list could, for a pod that does not exist, be looked up as a
// public name. An IP address is refused, since the agent cannot tell whose
// it is without the API server, which it never calls; only a loopback
// address is taken, which in a pod is the pod itself (the agents' tests
// stand for pods with loopback addresses). "" (detached) is allowed.
func UpstreamAllowed(upstream, podName, namespace string) error {
	if upstream == "" {
		return nil
	}
	if ip, err := netip.ParseAddr(upstream); err == nil {
		if ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("upstream %q is an IP address, which the agent cannot tell is a pod of its own Database: name the pod as %s",
			upstream, upstreamForm(podName, namespace))
	}
	db := databaseOfPod(podName)
	if db == "" || namespace == "" {
		return fmt.Errorf("upstream %q: the agent does not know its own Database (pod %q, namespace %q) and takes no upstream", upstream, podName, namespace)
	}
	suffix := "." + db + "-headless." + namespace + ".svc"
	host := upstream
	if h, ok := strings.CutSuffix(host, suffix+".cluster.local"); ok {
		host = h + suffix
	}
	if pod, ok := strings.CutSuffix(host, suffix); ok {
		if ord, ok := strings.CutPrefix(pod, db+"-"); ok && isOrdinal(ord) {
			return nil
		}
	}
	return fmt.Errorf("upstream %q is not a pod of this agent's Database %s in namespace %s: an upstream must be %s",
		upstream, db, namespace, upstreamForm(podName, namespace))
}

// upstreamForm describes the upstreams UpstreamAllowed takes.
func upstreamForm(podName, namespace string) string {
	db := databaseOfPod(podName)
	return fmt.Sprintf("%s-<ordinal>.%s-headless.%s.svc or that name followed by .cluster.local", db, db, namespace)
}

// databaseOfPod is the StatefulSet's name in its pod's name <db>-<n>, ""
// when podName has no such form.
func databaseOfPod(podName string) string {
	i := strings.LastIndexByte(podName, '-')
	if i <= 0 || !isOrdinal(podName[i+1:]) {
		return ""
	}
	return podName[:i]
}

// isOrdinal reports whether s is a StatefulSet ordinal as its pods' names
// write it: decimal digits, no leading zero.
func isOrdinal(s string) bool {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
