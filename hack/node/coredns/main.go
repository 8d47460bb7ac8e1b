// Command coredns is the pinned CoreDNS (this module's go.mod) built with
// the plugins devcluster's Corefile uses and nothing else, the way CoreDNS
// documents a build with a plugin list of one's own: the full build pulls
// in every cloud provider's SDK and takes minutes longer on a fresh
// machine. The Corefile is internal/test/devcluster's realNode.corefile;
// a plugin it names must be imported here and listed in directives.
package main

import (
	"log"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives are the plugins, in CoreDNS's own execution order
// (its plugin.cfg).
var directives = []string{"bind", "ready", "errors", "kubernetes"}

func main() {
	if err := dnsserver.SetDirectives(directives); err != nil {
		log.Fatal(err)
	}
	coremain.Run()
}
