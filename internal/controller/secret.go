package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// reconcileSecret creates the credentials Secret once and keeps its keys
// other than the password in line with the spec. An existing password,
// generated or edited by a user, is never replaced.
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
	password := string(live.Data[desired.SecretKeyPassword])
	if password == "" {
		if password, err = generatePassword(r.Random); err != nil {
			return childObservation{err: err}
		}
	}
	c := child{
		key: key, live: live, want: desired.Secret(s.spec, password),
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

const (
	passwordLength   = 32
	passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// generatePassword returns passwordLength characters drawn uniformly from
// passwordAlphabet.
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
