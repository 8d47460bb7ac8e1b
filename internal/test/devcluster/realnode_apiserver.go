package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
)

// The API server listens on 127.0.0.1 only, and its Service "kubernetes"
// (10.96.0.1:443, what a pod's in-cluster configuration calls) has no
// endpoints (--endpoint-reconciler-type=none). With a real node, pods such as
// dbkeeper's own manager deployed with `make deploy` need the API server as
// in any cluster: devcluster forwards connections to the bridge's address, at
// the API server's port, to the API server, and gives the Service an
// EndpointSlice to that address. kube-proxy then routes 10.96.0.1:443 there,
// and the API server's certificate names 10.96.0.1 and kubernetes.default.svc.
//
// The other way, the API server calling a webhook Service whose pods run on
// the real node, needs no forwarding: it dials the Service's ClusterIP (its
// default service resolver), kube-proxy's nat OUTPUT rules translate that to
// the pod's address, and the host's route to the Service range through the
// bridge (nodehost.Host.SetUpNetwork), with the bridge's address as source, carries it
// there; the pod answers on the bridge.

// apiServerSliceName is the EndpointSlice of the Service "kubernetes" that
// devcluster manages.
const apiServerSliceName = "kubernetes-devcluster"

// apiForwarder accepts connections on the bridge's address and copies each to
// the API server on 127.0.0.1 and back.
type apiForwarder struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// serveAPIToPods starts the forwarder and creates the Service's EndpointSlice.
func (n *realNode) serveAPIToPods(ctx context.Context) error {
	port := n.c.ports.apiserver
	l, err := net.Listen("tcp", net.JoinHostPort(nodehost.BridgeIP, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("devcluster: forward the API server to the pods: %w", err)
	}
	f := &apiForwarder{l: l, target: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), conns: map[net.Conn]struct{}{}}
	n.apiForwarder = f
	f.wg.Add(1)
	go f.serve()
	return n.c.create(ctx, apiServerSlice(port))
}

// apiServerSlice is the EndpointSlice of the Service "kubernetes": the
// bridge's address at port, under the Service's port name.
func apiServerSlice(port int) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: apiServerSliceName, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: "kubernetes",
				discoveryv1.LabelManagedBy:   "devcluster.dbkeeper.io",
			}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{nodehost.BridgeIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("https"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(port))},
		},
	}
}

func (f *apiForwarder) serve() {
	defer f.wg.Done()
	for {
		conn, err := f.l.Accept()
		if err != nil {
			return
		}
		if !f.track(conn, true) {
			_ = conn.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.track(conn, false)
			defer conn.Close()
			upstream, err := net.Dial("tcp", f.target)
			if err != nil {
				return
			}
			if !f.track(upstream, true) {
				_ = upstream.Close()
				return
			}
			defer f.track(upstream, false)
			defer upstream.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if c, ok := dst.(*net.TCPConn); ok {
					_ = c.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(upstream, conn)
			go pipe(conn, upstream)
			<-done
			<-done
		}()
	}
}

// track adds or removes a connection; adding fails once the forwarder is
// closed.
func (f *apiForwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.conns, c)
		return true
	}
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

// close stops accepting, closes every connection and waits for the copies.
func (f *apiForwarder) close() error {
	if f == nil {
		return nil
	}
	err := f.l.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
