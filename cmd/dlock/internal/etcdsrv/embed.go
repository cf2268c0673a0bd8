package etcdsrv

import (
	"net/url"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEmbedded starts the member's server in this process, configured as
// start configures a process. m.mu is held.
func (m *Member) startEmbedded() error {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = filepath.Join(m.dir, "data")
	cu, err := url.Parse(m.ClientURL)
	if err != nil {
		return err
	}
	pu, err := url.Parse(m.peerURL)
	if err != nil {
		return err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.ClusterState = m.initial, m.state
	cfg.InitialClusterToken = "dlock"
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.Logger, cfg.LogOutputs = "zap", []string{filepath.Join(m.dir, "etcd.log")}
	// It returns with the listeners open; the member is ready once a
	// majority runs, which WaitHealthy waits for.
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	m.emb, m.state = e, "existing"
	return nil
}
