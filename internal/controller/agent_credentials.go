package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// agentCredentialCache builds what a call to a Database's agents presents
// from its agent keys Secret in the operator's namespace (namespace), and
// keeps the parsed TLS configuration per Secret and resourceVersion, so
// that a reconcile parses no key when the Secret did not change. Nothing
// in the Database's own namespace goes into it: what is there, anyone who
// may read Secrets there reads. The zero value, given a namespace, is
// ready to use.
type agentCredentialCache struct {
	namespace string

	mu      sync.Mutex
	configs map[types.NamespacedName]cachedTLS
}

type cachedTLS struct {
	version string
	config  *tls.Config
}

// get returns the credentials for db's agents: mTLS from the agent keys
// Secret, and while the credentials Secret of a Database made by an
// earlier release still holds SecretKeyAgentToken, that token for the
// agents of that release (instance.AgentCredentials.LegacyToken).
func (c *agentCredentialCache) get(ctx context.Context, reader client.Reader, db *dbv1.Database) (instance.AgentCredentials, error) {
	if c.namespace == "" {
		return instance.AgentCredentials{}, errors.New("the operator has no namespace for the agents' keys: set --agent-keys-namespace")
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: c.namespace, Name: desired.AgentKeysSecretName(db)}
	if err := reader.Get(ctx, key, secret); err != nil {
		return instance.AgentCredentials{}, fmt.Errorf("reading the agents' credentials, Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	config, err := c.tlsConfig(db, secret)
	if err != nil {
		return instance.AgentCredentials{}, err
	}
	creds := instance.AgentCredentials{TLS: config}
	legacy := &corev1.Secret{}
	err = reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: desired.SecretName(db)}, legacy)
	switch {
	case err == nil:
		creds.LegacyToken = string(legacy.Data[desired.SecretKeyAgentToken])
	case client.IgnoreNotFound(err) != nil:
		return instance.AgentCredentials{}, fmt.Errorf("reading the credentials Secret: %w", err)
	}
	return creds, nil
}

// tlsConfig returns the parsed configuration of secret, the agent keys
// Secret of db.
func (c *agentCredentialCache) tlsConfig(db *dbv1.Database, secret *corev1.Secret) (*tls.Config, error) {
	id := types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got, ok := c.configs[id]; ok && got.version == secret.ResourceVersion && secret.ResourceVersion != "" {
		return got.config, nil
	}
	config, err := agentTLSConfig(db, secret.Data)
	if err != nil {
		return nil, fmt.Errorf("the agent keys Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	if c.configs == nil {
		c.configs = map[types.NamespacedName]cachedTLS{}
	}
	c.configs[id] = cachedTLS{version: secret.ResourceVersion, config: config}
	return config, nil
}

// forget drops what is kept of db's agent keys Secret.
func (c *agentCredentialCache) forget(db types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := desired.AgentKeysSecretName(&dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name}})
	delete(c.configs, types.NamespacedName{Namespace: c.namespace, Name: name})
}

// agentTLSConfig is the client side of the agents' mTLS, from the agent
// keys Secret's data: it trusts only the Database's agent CAs (while one
// replaces another, both), checks the name in the agents' serving
// certificate, and presents the operator's client certificate.
func agentTLSConfig(db *dbv1.Database, data map[string][]byte) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[desired.SecretKeyAgentCACert]) {
		return nil, errors.New(desired.SecretKeyAgentCACert + " holds no PEM certificate; delete the key and the operator makes a new CA")
	}
	for _, k := range []string{desired.SecretKeyPreviousAgentCACert, desired.SecretKeyNextAgentCACert} {
		if len(data[k]) > 0 && !roots.AppendCertsFromPEM(data[k]) {
			return nil, errors.New(k + " holds no PEM certificate")
		}
	}
	cert, err := tls.X509KeyPair(data[desired.SecretKeyOperatorCert], data[desired.SecretKeyOperatorKey])
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w; delete both keys and the operator issues them again", desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey, err)
	}
	return &tls.Config{
		RootCAs:      roots,
		ServerName:   desired.AgentServerName(db),
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
	}, nil
}
