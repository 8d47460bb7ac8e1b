package objectstore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
)

// Request is what a Recorder saw of one request to the store.
type Request struct {
	Method string
	// Path is the request's path and query, such as /backups/shop/orders/wals/….
	Path   string
	Header http.Header
}

// Recorder is an HTTPS proxy in front of an object store that records each
// request it forwards, so that a test can check what a client sent the
// store: versitygw's posix backend accepts S3's server-side encryption
// headers (x-amz-server-side-encryption) and keeps no trace of them. The
// requests reach the store unchanged, Host included, so that their
// signatures still verify.
type Recorder struct {
	// URL is the proxy's https://127.0.0.1:PORT, the endpoint clients use
	// instead of the store's.
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	requests []Request
}

// NewRecorder starts a Recorder that serves HTTPS with the certificate and
// key in certFile and keyFile (a certificate for 127.0.0.1) and forwards to
// the store at target (https://HOST:PORT), whose certificate roots verify.
func NewRecorder(target string, roots *x509.CertPool, certFile, keyFile string) (*Recorder, error) {
	to, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("objectstore: recorder target %q: %w", target, err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("objectstore: recorder certificate: %w", err)
	}
	r := &Recorder{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(to)
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: to.Hostname(), MinVersion: tls.VersionTLS12}},
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, Request{Method: req.Method, Path: req.URL.RequestURI(), Header: req.Header.Clone()})
		r.mu.Unlock()
		proxy.ServeHTTP(w, req)
	}))
	r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	r.srv.StartTLS()
	r.URL = r.srv.URL
	return r, nil
}

// Requests returns the requests recorded so far, in order.
func (r *Recorder) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// Close stops the Recorder.
func (r *Recorder) Close() { r.srv.Close() }
