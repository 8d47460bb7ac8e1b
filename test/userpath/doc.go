// Package userpath runs what README.md tells a user to do, as a user does
// it: `make run` (and `sudo make run REAL_NODE=true` on a real node) started
// exactly as the README writes it, the commands of the README's code blocks
// in another shell with the KUBECONFIG and PATH that make run prints, and a
// SIGINT to stop it all, as Ctrl-C sends it (to make's process group) and as
// `kill -INT <make's PID>` does (to make alone), after which none of the
// processes it started may remain. The commands come from the README's code blocks that
// follow the markers `<!-- test/userpath: NAME ... -->`; a missing marker
// fails the test, so the README and the test cannot drift apart.
package userpath
