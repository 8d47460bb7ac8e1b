package controller

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// reconcileSecret creates the credentials Secret once and keeps its keys
// other than the generated ones in line with the spec. A generated value
// present in the live Secret (the password, and for postgres the
// replication password and the agent token), generated or edited by a user,
// is never replaced; one that is missing, as in a Secret made before that
// key existed, is generated and added, and the apply leaves every other key
// as it is.
func (r *DatabaseReconciler) reconcileSecret(ctx context.Context, s *scope) childObservation {
	key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.SecretName(s.db)}
	live := &corev1.Secret{}
	found, err := r.getCached(ctx, key, live)
	if err == nil && !found {
		// The cache holds only labelled Secrets. Before generating a
		// password, make sure no Secret exists whose labels were edited:
		// the one read of the API server a new Database costs.
		found, err = r.getLive(ctx, key, live)
	}
	if err != nil {
		return childObservation{err: err}
	}
	creds, err := r.credentials(s, live)
	if err != nil {
		return childObservation{err: err}
	}
	c := child{
		key: key, live: live, want: desired.Secret(s.spec, creds),
		owned: func() (any, error) { return corev1ac.ExtractSecret(live, desired.FieldManager) },
	}
	res := applyResult{found: found}
	if !found {
		// Created, or found out of the cache's sight after all.
		if res, err = r.create(ctx, s, c); err != nil {
			return childObservation{err: err}
		}
	}
	if res.found {
		res, err = r.update(ctx, s, c)
	}
	return childObservation{err: err, blocked: res.blocked}
}

// credentials returns the generated values of the Secret: each the live
// Secret's when it holds one, else a new one.
func (r *DatabaseReconciler) credentials(s *scope, live *corev1.Secret) (desired.Credentials, error) {
	var errs []error
	keep := func(key string) string {
		if v := string(live.Data[key]); v != "" {
			return v
		}
		v, err := generatePassword(r.Random)
		errs = append(errs, err)
		return v
	}
	creds := desired.Credentials{Password: keep(desired.SecretKeyPassword)}
	if desired.HasInstanceAgent(s.spec) {
		creds.ReplicationPassword = keep(desired.SecretKeyReplicationPassword)
		creds.AgentToken = keep(desired.SecretKeyAgentToken)
	}
	return creds, errors.Join(errs...)
}

const (
	passwordLength   = 32
	passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// generatePassword returns passwordLength characters drawn uniformly from
// passwordAlphabet (about 190 bits): a password, or an agent token.
func generatePassword(random io.Reader) (string, error) {
	b := make([]byte, passwordLength)
	limit := big.NewInt(int64(len(passwordAlphabet)))
	for i := range b {
		n, err := rand.Int(random, limit)
		if err != nil {
			return "", fmt.Errorf("generating a password: %w", err)
		}
		b[i] = passwordAlphabet[n.Int64()]
	}
	return string(b), nil
}
