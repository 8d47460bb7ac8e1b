package v1alpha1

// The issuer kinds and group spec.tls.issuerRef may name: cert-manager's.
const (
	// IssuerKindIssuer is a cert-manager Issuer in the Database's
	// namespace, the default kind.
	IssuerKindIssuer = "Issuer"
	// IssuerKindClusterIssuer is a cert-manager ClusterIssuer.
	IssuerKindClusterIssuer = "ClusterIssuer"
	// IssuerGroupCertManager is cert-manager's API group, the default
	// group.
	IssuerGroupCertManager = "cert-manager.io"
)

// TLSSpec configures the TLS of a postgres Database's server, for its
// clients and for replication. TLS is on for every postgres Database:
// spec.tls only says who issues the server's certificate and whether
// connections without TLS are refused.
type TLSSpec struct {
	// issuerRef names the cert-manager issuer that signs the server's
	// certificate: dbkeeper makes a cert-manager Certificate named after
	// the Database, and cert-manager writes the Secret <name>-tls.
	// Without it dbkeeper runs a certificate authority of the Database's
	// own (the Secret <name>-ca) and issues and renews the certificate
	// itself. Either way the credentials Secret's ca.crt is the CA to
	// verify the server with, and its uri asks for sslmode=verify-full.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`

	// required, when true, makes the server refuse connections without
	// TLS, from clients and standbys alike (pg_hba.conf has hostssl lines
	// only). When false, clients may still connect without TLS, although
	// the credentials Secret's uri asks for verify-full. Changing it
	// restarts the pods.
	// +optional
	Required bool `json:"required,omitempty"`
}

// IssuerReference names a cert-manager Issuer or ClusterIssuer, as
// cert-manager's own ObjectReference does.
type IssuerReference struct {
	// name is the issuer's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// kind is Issuer (in the Database's namespace) or ClusterIssuer.
	// Defaults to Issuer.
	// +optional
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	Kind string `json:"kind,omitempty"`

	// group is the issuer's API group: cert-manager.io, the default.
	// +optional
	// +kubebuilder:validation:Enum=cert-manager.io
	Group string `json:"group,omitempty"`
}
