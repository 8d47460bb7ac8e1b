package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// testTLSRules checks, against an API server with the CRDs and no
// webhooks, that the schema refuses what the webhooks refuse of spec.tls
// wherever OpenAPI and CEL can say it.
func testTLSRules(t *testing.T, c client.Client) {
	ctx := context.Background()
	creates := []struct {
		name string
		spec dbv1.DatabaseSpec
		want string // the error, "" when the Database is stored
	}{
		{
			name: "TLS required with the CA dbkeeper runs",
			spec: dbv1.DatabaseSpec{TLS: &dbv1.TLSSpec{Required: true}},
		},
		{
			name: "a ClusterIssuer of cert-manager",
			spec: dbv1.DatabaseSpec{TLS: &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "corp", Kind: "ClusterIssuer", Group: "cert-manager.io"}}},
		},
		{
			name: "TLS settings for mysql",
			spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, TLS: &dbv1.TLSSpec{}},
			want: "spec.tls: Forbidden: TLS settings are supported for postgres only: remove spec.tls for mysql",
		},
		{
			name: "an issuer kind cert-manager does not have",
			spec: dbv1.DatabaseSpec{TLS: &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "vault", Kind: "VaultIssuer"}}},
			want: `[spec.tls.issuerRef.kind: Unsupported value: "VaultIssuer": supported values: "Issuer", "ClusterIssuer"` +
				`, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		},
		{
			name: "an issuer of another group",
			spec: dbv1.DatabaseSpec{TLS: &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "step", Group: "certmanager.step.sm"}}},
			want: `[spec.tls.issuerRef.group: Unsupported value: "certmanager.step.sm": supported values: "cert-manager.io"` +
				`, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		},
		{
			name: "an issuer without a name",
			spec: dbv1.DatabaseSpec{TLS: &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{}}},
			want: `spec.tls.issuerRef.name: Invalid value: "": spec.tls.issuerRef.name in body should be at least 1 chars long`,
		},
	}
	for i, tt := range creates {
		t.Run(tt.name, func(t *testing.T) {
			db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tls-%d", i), Namespace: "default"}, Spec: tt.spec}
			assertInvalid(t, c.Create(ctx, db), "Database", db.Name, tt.want)
		})
	}
}
