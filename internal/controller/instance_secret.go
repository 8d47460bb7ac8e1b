package controller

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// Validity of the agents' certificates. pki renews a certificate when a
// third of its validity is left, and a CA when it would not outlive a new
// leaf certificate by a third of the leaf's validity.
const (
	agentCAValidity   = 10 * 365 * 24 * time.Hour
	agentCertValidity = 365 * 24 * time.Hour
)

// reconcileInstanceSecret creates the instance Secret of a Database with
// the instance agent once, and keeps its values: each present value is
// kept, a missing one is made (a password generated; the replication
// password of a Database made by an earlier release copied from its
// credentials Secret, which its servers use), and a certificate pki.Check
// finds unfit (expiring, another CA, other names, a key that does not
// match) is issued again. It runs before the StatefulSet, whose pods mount
// the Secret. Like the credentials Secret, one the cache lacks is created
// with a plain create and read only when the name is taken; one that is
// not the Database's is left as it is, and none of its values used.
func (r *DatabaseReconciler) reconcileInstanceSecret(ctx context.Context, s *scope) childObservation {
	key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.InstanceSecretName(s.db)}
	live := &corev1.Secret{}
	found, err := r.applier().Find(ctx, key, live)
	if err != nil {
		return childObservation{err: err}
	}
	if !found {
		values, _, err := r.instanceValues(s, live)
		if err != nil {
			return childObservation{err: err}
		}
		created, err := r.createSecretObject(ctx, s, key, desired.InstanceSecret(s.spec, values))
		if err != nil || created {
			return childObservation{err: err}
		}
		if found, err = r.applier().GetLive(ctx, key, live); err == nil && !found {
			err = fmt.Errorf("creating Secret %s: it exists, and then did not: retrying", key.Name)
		}
		if err != nil {
			return childObservation{err: err}
		}
	}
	if p := r.ownershipProblem(s.db, live); p != nil {
		return childObservation{blocked: p}
	}
	values, renewed, err := r.instanceValues(s, live)
	if err != nil {
		return childObservation{err: err}
	}
	want := desired.InstanceSecret(s.spec, values)
	c := apply.Child{Key: key, Live: live, Want: want, Owned: func() (any, error) { return desired.SecretHeld(want, live), nil }}
	res, err := r.update(ctx, s, c)
	if err == nil && res.Wrote && len(renewed) > 0 {
		s.wrote("Updated", r.kindOf(live), key.Name, "issued again in Secret "+key.Name+": "+strings.Join(renewed, "; "))
	}
	return childObservation{err: err, blocked: res.blocked}
}

// instanceValues returns the values of the instance Secret: live's where
// they are present and fit, new ones otherwise, and why each certificate
// made again (not a missing one) was.
func (r *DatabaseReconciler) instanceValues(s *scope, live *corev1.Secret) (map[string][]byte, []string, error) {
	old := map[string][]byte{}
	if s.credentials != nil {
		old = s.credentials.Data
	}
	return instanceSecretValues(s.spec, live.Data, old, s.obs.now, r.Random)
}

// instanceSecretValues is the policy of reconcileInstanceSecret: have are
// the live Secret's values, credentials the live credentials Secret's.
func instanceSecretValues(db *dbv1.Database, have, credentials map[string][]byte, now time.Time, random io.Reader) (map[string][]byte, []string, error) {
	out := make(map[string][]byte, len(desired.InstanceSecretKeys))
	for _, k := range desired.InstanceSecretKeys {
		if v := have[k]; len(v) > 0 {
			out[k] = v
		}
	}
	password := func(key string, fallback []byte) error {
		if len(out[key]) > 0 {
			return nil
		}
		if len(fallback) > 0 {
			out[key] = fallback
			return nil
		}
		p, err := generatePassword(random)
		out[key] = []byte(p)
		return err
	}
	if err := password(desired.SecretKeySuperuserPassword, nil); err != nil {
		return nil, nil, err
	}
	if err := password(desired.SecretKeyInstanceReplicationPassword, credentials[desired.SecretKeyReplicationPassword]); err != nil {
		return nil, nil, err
	}

	var renewed []string
	ca := pki.KeyPair{CertPEM: out[desired.SecretKeyAgentCA], KeyPEM: out[desired.SecretKeyAgentCAKey]}
	if why := pki.CheckCA(ca, agentCertValidity, now); why != "" {
		if len(ca.CertPEM) > 0 || len(ca.KeyPEM) > 0 {
			renewed = append(renewed, "the agent CA: "+why)
		}
		var err error
		if ca, err = pki.NewCA("dbkeeper agent CA "+db.Namespace+"/"+db.Name, agentCAValidity, now, random); err != nil {
			return nil, nil, fmt.Errorf("making the agent CA: %w", err)
		}
		out[desired.SecretKeyAgentCA], out[desired.SecretKeyAgentCAKey] = ca.CertPEM, ca.KeyPEM
	}
	leaves := []struct {
		what          string
		certKey, kKey string
		req           pki.Request
	}{
		{"the agents' certificate", desired.SecretKeyAgentCert, desired.SecretKeyAgentKey, agentServerRequest(db)},
		{"the operator's certificate", desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey, operatorClientRequest()},
	}
	for _, l := range leaves {
		cert, key := out[l.certKey], out[l.kKey]
		why := pki.Check(ca.CertPEM, cert, l.req, now)
		if why == "" {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				why = "the key does not match the certificate"
			}
		}
		if why == "" {
			continue
		}
		if len(cert) > 0 || len(key) > 0 {
			renewed = append(renewed, l.what+": "+why)
		}
		pair, err := pki.Issue(ca, l.req, now, random)
		if err != nil {
			return nil, nil, fmt.Errorf("issuing %s: %w", l.what, err)
		}
		out[l.certKey], out[l.kKey] = pair.CertPEM, pair.KeyPEM
	}
	return out, renewed, nil
}

// agentServerRequest is the agents' serving certificate: the name the
// operator checks when it calls an agent by its pod's address.
func agentServerRequest(db *dbv1.Database) pki.Request {
	name := desired.AgentServerName(db)
	return pki.Request{CommonName: name, DNSNames: []string{name}, Usage: pki.Server, Validity: agentCertValidity}
}

// operatorClientRequest is the operator's client certificate, the only
// client the agents take commands from.
func operatorClientRequest() pki.Request {
	return pki.Request{CommonName: desired.AgentClientName, Usage: pki.Client, Validity: agentCertValidity}
}
