package rules

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// tlsPath is spec.tls.
var tlsPath = specPath.Child("tls")

// issuerKinds are the supported values of spec.tls.issuerRef.kind.
var issuerKinds = []string{dbv1.IssuerKindIssuer, dbv1.IssuerKindClusterIssuer}

// defaultTLS fills in spec.tls.issuerRef's kind (Issuer, as cert-manager
// defaults it) and group (cert-manager.io). A Database without spec.tls
// stays without it: its server runs TLS with a certificate of the CA
// dbkeeper runs for it.
func defaultTLS(db *dbv1.Database) {
	if db.Spec.TLS == nil || db.Spec.TLS.IssuerRef == nil {
		return
	}
	ref := db.Spec.TLS.IssuerRef
	if ref.Kind == "" {
		ref.Kind = dbv1.IssuerKindIssuer
	}
	if ref.Group == "" {
		ref.Group = dbv1.IssuerGroupCertManager
	}
}

// validateTLS checks spec.tls: postgres only, and an issuerRef that names
// a cert-manager Issuer or ClusterIssuer.
func validateTLS(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	t := spec.TLS
	if t == nil {
		return
	}
	if engine != nil && engine.Name != dbv1.EnginePostgres {
		*errs = append(*errs, field.Forbidden(tlsPath, "TLS settings are supported for postgres only: remove spec.tls for mysql"))
		return
	}
	ref := t.IssuerRef
	if ref == nil {
		return
	}
	path := tlsPath.Child("issuerRef")
	if p := path.Child("name"); ref.Name == "" {
		*errs = append(*errs, field.Required(p, "name the cert-manager Issuer or ClusterIssuer that signs the server's certificate, or remove issuerRef for a CA dbkeeper runs for the Database"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(ref.Name) {
			*errs = append(*errs, field.Invalid(p, ref.Name, msg))
		}
	}
	switch p := path.Child("kind"); {
	case ref.Kind == "":
		*errs = append(*errs, field.Required(p, ""))
	case !slices.Contains(issuerKinds, ref.Kind):
		err := field.NotSupported(p, ref.Kind, issuerKinds)
		err.Detail += ": dbkeeper makes a cert-manager Certificate, which names an Issuer of its namespace or a ClusterIssuer"
		*errs = append(*errs, err)
	}
	switch p := path.Child("group"); {
	case ref.Group == "":
		*errs = append(*errs, field.Required(p, ""))
	case ref.Group != dbv1.IssuerGroupCertManager:
		err := field.NotSupported(p, ref.Group, []string{dbv1.IssuerGroupCertManager})
		err.Detail += ": dbkeeper asks cert-manager for the certificate, and knows no issuer of another group"
		*errs = append(*errs, err)
	}
}

// tlsChangesPods reports whether a change of spec.tls changes the pod
// template: spec.tls.required does (the agent reads it at start); the
// issuer does not (the certificate's Secret keeps its name, and the
// agent picks up a new certificate without a restart).
func tlsChangesPods(oldSpec, newSpec *dbv1.DatabaseSpec) bool {
	return TLSRequired(oldSpec) != TLSRequired(newSpec)
}

// TLSRequired reports whether spec.tls.required is set.
func TLSRequired(spec *dbv1.DatabaseSpec) bool {
	return spec.TLS != nil && spec.TLS.Required
}
