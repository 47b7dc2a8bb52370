/* Helpers for what bindgen cannot express (thread-local macros) or what is shorter in C
 * (a pool creation that differs from rte_pktmbuf_pool_create only in its flags). */
#include <string.h>
#include <rte_bus.h>
#include "wrapper.h"

int fh_rte_errno(void) { return rte_errno; }

/* The name of the bus port_id's device is on ("vdev", "pci"…), or NULL. */
const char *fh_port_bus_name(uint16_t port_id)
{
	struct rte_eth_dev_info info;
	const struct rte_bus *bus;

	if (rte_eth_dev_info_get(port_id, &info) != 0 || info.device == NULL)
		return NULL;
	bus = rte_dev_bus(info.device);
	return bus == NULL ? NULL : rte_bus_name(bus);
}

/* rte_pktmbuf_pool_create with mempool flags: RTE_MEMPOOL_F_NO_IOVA_CONTIG packs the
 * objects back to back (no skips at page boundaries), which net_af_xdp needs, since it
 * registers the pool as one UMEM of populated_size * object size bytes. Sets rte_errno
 * and returns NULL on failure. */
struct rte_mempool *fh_pktmbuf_pool_create(const char *name, unsigned int n,
					   unsigned int cache_size, uint16_t data_room_size,
					   int socket_id, unsigned int flags)
{
	struct rte_pktmbuf_pool_private priv;
	struct rte_mempool *mp;
	int ret;

	memset(&priv, 0, sizeof(priv));
	priv.mbuf_data_room_size = data_room_size;
	mp = rte_mempool_create_empty(name, n, sizeof(struct rte_mbuf) + data_room_size,
				      cache_size, sizeof(priv), socket_id, flags);
	if (mp == NULL)
		return NULL;
	ret = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL);
	if (ret == 0) {
		rte_pktmbuf_pool_init(mp, &priv);
		ret = rte_mempool_populate_default(mp);
	}
	if (ret < 0) {
		rte_mempool_free(mp);
		rte_errno = -ret;
		return NULL;
	}
	rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
	return mp;
}
