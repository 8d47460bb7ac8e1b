package controller

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// reconcileSecret creates the credentials Secret once and keeps its keys
// other than the generated one in line with the spec. The password present
// in the live Secret, generated or edited by a user, is never replaced; a
// missing one is generated and added, and the apply leaves every other key
// as it is (the replication password and agent token of a Secret an
// earlier release made stay until migrateCredentials removes them).
//
// The cache holds only labelled Secrets, and one it lacks may still exist:
// made by a user before the Database, or with its labels edited. So a
// Secret the cache lacks is created with a plain create, which the API
// server refuses when the name is taken, instead of an apply, which would
// replace the password: only then is it read. A new Database's Secret costs
// no read. A Secret that is not the Database's (ownershipProblem) is left
// as it is, and none of its values is read into the Database's children.
func (r *DatabaseReconciler) reconcileSecret(ctx context.Context, s *scope) childObservation {
	key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.SecretName(s.db)}
	live := &corev1.Secret{}
	found, err := r.applier().Find(ctx, key, live)
	if err != nil {
		return childObservation{err: err}
	}
	if !found {
		var created bool
		if created, err = r.createSecret(ctx, s, key); err != nil || created {
			return childObservation{err: err}
		}
		// Taken: read the Secret that holds the name, and keep its values.
		if found, err = r.applier().GetLive(ctx, key, live); err == nil && !found {
			err = fmt.Errorf("creating Secret %s: it exists, and then did not: retrying", key.Name)
		}
		if err != nil {
			return childObservation{err: err}
		}
	}
	if p := r.ownershipProblem(s.db, live); p != nil {
		// Nothing of it is used: its password is not the Database's.
		return childObservation{blocked: p}
	}
	s.credentials = live
	creds, err := r.credentials(s, live)
	if err != nil {
		return childObservation{err: err}
	}
	want := desired.Secret(s.spec, creds)
	c := apply.Child{Key: key, Live: live, Want: want, Owned: func() (any, error) { return desired.SecretHeld(want, live), nil }}
	res, err := r.update(ctx, s, c)
	s.credentialsWrote = res.Wrote
	return childObservation{err: err, blocked: res.blocked}
}

// createSecret creates the credentials Secret with newly generated values.
// It reports false, and no error, when a Secret of that name exists.
func (r *DatabaseReconciler) createSecret(ctx context.Context, s *scope, key client.ObjectKey) (bool, error) {
	creds, err := r.credentials(s, &corev1.Secret{})
	if err != nil {
		return false, err
	}
	return r.createSecretObject(ctx, s, key, desired.Secret(s.spec, creds))
}

// createSecretObject creates the Secret want with a plain create. It
// reports false, and no error, when a Secret of that name exists.
func (r *DatabaseReconciler) createSecretObject(ctx context.Context, s *scope, key client.ObjectKey, want *corev1ac.SecretApplyConfiguration) (bool, error) {
	secret, err := typed[corev1.Secret](want)
	if err != nil {
		return false, err
	}
	err = r.Client.Create(ctx, secret, client.FieldOwner(desired.FieldManager))
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("creating Secret %s: %w", key.Name, err)
	}
	kind := r.kindOf(secret)
	r.applier().Created(kind, key)
	apply.CountWrite(kind.Kind, "create")
	s.wrote("Created", kind, key.Name, "created Secret "+key.Name)
	return true, nil
}

// typed converts an apply configuration to the object it describes.
func typed[T any](ac any) (*T, error) {
	raw, err := json.Marshal(ac)
	if err != nil {
		return nil, err
	}
	obj := new(T)
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("converting %T: %w", ac, err)
	}
	return obj, nil
}

// credentials returns the values of the Secret: each generated one the
// live Secret's when it holds one, else a new one, and the CA of the
// server's TLS certificate.
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
		creds.CA = s.obs.tls.ca
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
