package controller

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// observeCertificates reads, from the cache, the certificates of the
// Secrets labelled with the Database's name and when each expires, by
// Secret and key; false when the Secrets could not be listed.
func (r *DatabaseReconciler) observeCertificates(ctx context.Context, s *scope) ([]dbv1.CertificateStatus, bool) {
	secrets := &corev1.SecretList{}
	if err := r.Client.List(ctx, secrets, client.InNamespace(s.db.Namespace), client.MatchingLabels{desired.LabelInstance: s.db.Name}); err != nil {
		log.FromContext(ctx).Info("listing the Database's Secrets for their certificates' expiry", "error", err.Error())
		return nil, false
	}
	return certificateStatuses(secrets.Items), true
}

// certificateStatuses are the certificates of secrets with when each
// expires, by Secret and key.
func certificateStatuses(secrets []corev1.Secret) []dbv1.CertificateStatus {
	var out []dbv1.CertificateStatus
	for i := range secrets {
		for k, t := range certificateExpiries(secrets[i].Data) {
			out = append(out, dbv1.CertificateStatus{Secret: secrets[i].Name, Key: k, NotAfter: metav1.NewTime(t.UTC().Truncate(time.Second))})
		}
	}
	slices.SortFunc(out, func(a, b dbv1.CertificateStatus) int {
		return cmp.Or(strings.Compare(a.Secret, b.Secret), strings.Compare(a.Key, b.Key))
	})
	if len(out) > 32 {
		out = out[:32] // the schema's bound
	}
	return out
}
