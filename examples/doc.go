// Package examples holds runnable programs a newcomer starts from: the
// end-to-end demo (make demo), trace replay and API clients.
package examples
