package rules_test

import (
	"testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestDefaultTLS(t *testing.T) {
	tests := []struct {
		name string
		db   *dbv1.Database
		want *dbv1.TLSSpec
	}{
		{name: "leaves a Database without spec.tls without it", db: defaulted()},
		{name: "leaves spec.tls without an issuer as it is", db: defaulted(fixture.WithTLS(func(t *dbv1.TLSSpec) { t.Required = true })),
			want: &dbv1.TLSSpec{Required: true}},
		{name: "fills in kind Issuer and group cert-manager.io", db: defaulted(fixture.WithIssuer("", "shop-ca")),
			want: &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "shop-ca", Kind: "Issuer", Group: "cert-manager.io"}}},
		{name: "keeps a ClusterIssuer", db: defaulted(fixture.WithIssuer("ClusterIssuer", "corp")),
			want: &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "corp", Kind: "ClusterIssuer", Group: "cert-manager.io"}}},
		{name: "keeps a kind and group it does not know, for validation to refuse", db: defaulted(fixture.WithIssuer("Vault", "v"),
			func(db *dbv1.Database) { db.Spec.TLS.IssuerRef.Group = "example.com" }),
			want: &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "v", Kind: "Vault", Group: "example.com"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.db.Spec.TLS
			if (got == nil) != (tt.want == nil) || got != nil && (got.Required != tt.want.Required ||
				(got.IssuerRef == nil) != (tt.want.IssuerRef == nil) || got.IssuerRef != nil && *got.IssuerRef != *tt.want.IssuerRef) {
				t.Errorf("spec.tls = %+v, want %+v", got, tt.want)
			}
			again := tt.db.DeepCopy()
			testRules.Default(again)
			if !equalSpecs(again, tt.db) {
				t.Errorf("defaulting twice changed spec.tls: %+v", again.Spec.TLS)
			}
		})
	}
}

func equalSpecs(a, b *dbv1.Database) bool {
	return a.Spec.TLS == nil && b.Spec.TLS == nil ||
		a.Spec.TLS != nil && b.Spec.TLS != nil && a.Spec.TLS.Required == b.Spec.TLS.Required &&
			(a.Spec.TLS.IssuerRef == nil) == (b.Spec.TLS.IssuerRef == nil) &&
			(a.Spec.TLS.IssuerRef == nil || *a.Spec.TLS.IssuerRef == *b.Spec.TLS.IssuerRef)
}

func TestValidateTLSAccepts(t *testing.T) {
	tests := map[string]*dbv1.Database{
		"no spec.tls: the CA dbkeeper runs":      defaulted(),
		"TLS required with the CA dbkeeper runs": defaulted(fixture.WithTLS(func(t *dbv1.TLSSpec) { t.Required = true })),
		"an Issuer of the namespace":             defaulted(fixture.WithIssuer("", "shop-ca")),
		"a ClusterIssuer, required":              defaulted(fixture.WithIssuer("ClusterIssuer", "corp.example.com"), func(db *dbv1.Database) { db.Spec.TLS.Required = true }),
	}
	for name, db := range tests {
		t.Run(name, func(t *testing.T) {
			assertErrors(t, testRules.Validate(db))
		})
	}
}

func TestValidateTLSRefuses(t *testing.T) {
	tests := []struct {
		name string
		db   *dbv1.Database
		want []fieldError
		// detail are what the last error of want says.
		detail []string
	}{
		{
			name: "spec.tls on mysql",
			db:   fixture.Defaulted(fixture.Database("orders", fixture.WithEngine(dbv1.EngineMySQL), fixture.WithTLS())),
			want: []fieldError{forbidden("spec.tls")}, detail: []string{"TLS settings are supported for postgres only: remove spec.tls for mysql"},
		},
		{
			name: "an issuer without a name",
			db:   defaulted(fixture.WithIssuer("ClusterIssuer", "")),
			want: []fieldError{required("spec.tls.issuerRef.name")},
			detail: []string{"name the cert-manager Issuer or ClusterIssuer that signs the server's certificate, " +
				"or remove issuerRef for a CA dbkeeper runs for the Database"},
		},
		{
			name: "an issuer name that is no object name",
			db:   defaulted(fixture.WithIssuer("", "Shop_CA")),
			want: []fieldError{invalidAt("spec.tls.issuerRef.name")}, detail: []string{"lowercase RFC 1123 subdomain"},
		},
		{
			name: "an issuer kind dbkeeper does not know",
			db:   defaulted(fixture.WithIssuer("VaultIssuer", "vault")),
			want: []fieldError{notSupported("spec.tls.issuerRef.kind")},
			detail: []string{`Unsupported value: "VaultIssuer": supported values: "Issuer", "ClusterIssuer"`,
				"dbkeeper makes a cert-manager Certificate, which names an Issuer of its namespace or a ClusterIssuer"},
		},
		{
			name: "an issuer of another group",
			db:   defaulted(fixture.WithIssuer("Issuer", "step"), func(db *dbv1.Database) { db.Spec.TLS.IssuerRef.Group = "certmanager.step.sm" }),
			want: []fieldError{notSupported("spec.tls.issuerRef.group")},
			detail: []string{`Unsupported value: "certmanager.step.sm": supported values: "cert-manager.io"`,
				"knows no issuer of another group"},
		},
		{
			name: "every issuer field wrong at once, in the order of the fields",
			db: fixture.With(valid(), fixture.WithIssuer("", ""), func(db *dbv1.Database) {
				db.Spec.TLS.IssuerRef.Kind, db.Spec.TLS.IssuerRef.Group = "Foo", "bar.io"
			}),
			want: []fieldError{required("spec.tls.issuerRef.name"), notSupported("spec.tls.issuerRef.kind"), notSupported("spec.tls.issuerRef.group")},
		},
		{
			name: "the server's certificate among the parameters",
			db:   defaulted(fixture.WithParameter("ssl_cert_file", "/etc/ssl/mine.crt")),
			want: []fieldError{forbidden("spec.parameters[ssl_cert_file]")}, detail: []string{"owned by dbkeeper for TLS, which is always on: set spec.tls instead"},
		},
		{
			name: "an issuer that was not defaulted",
			db:   fixture.With(valid(), fixture.WithIssuer("", "shop-ca")),
			want: []fieldError{required("spec.tls.issuerRef.kind"), required("spec.tls.issuerRef.group")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := testRules.Validate(tt.db)
			assertErrors(t, errs, tt.want...)
			if len(tt.detail) > 0 {
				assertDetail(t, errs, tt.want[len(tt.want)-1].Field, tt.detail...)
			}
		})
	}
}

func TestTLSRequiredChangeWarnsOfRestarts(t *testing.T) {
	tests := []struct {
		name     string
		old, new *dbv1.Database
		want     []string
	}{
		{
			name: "requiring TLS restarts the pods",
			old:  defaulted(fixture.WithReplicas(3)),
			new:  defaulted(fixture.WithReplicas(3), fixture.WithTLS(func(t *dbv1.TLSSpec) { t.Required = true })),
			want: []string{"changing spec.tls.required restarts 3 pods of StatefulSet orders, one at a time"},
		},
		{
			name: "naming an issuer restarts nothing",
			old:  defaulted(fixture.WithReplicas(3)),
			new:  defaulted(fixture.WithReplicas(3), fixture.WithIssuer("ClusterIssuer", "corp")),
		},
		{
			name: "an empty spec.tls is no change",
			old:  defaulted(fixture.WithReplicas(3)),
			new:  defaulted(fixture.WithReplicas(3), fixture.WithTLS()),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, errs := testRules.ValidateUpdate(tt.old, tt.new)
			assertErrors(t, errs)
			if len(warnings) != len(tt.want) || len(tt.want) > 0 && warnings[0] != tt.want[0] {
				t.Errorf("warnings = %q, want %q", warnings, tt.want)
			}
		})
	}
}
