// Package samples holds the test that every manifest in samples/ applies, unchanged, to a real
// API server with the Magos CRDs and admission policies installed.
package samples
