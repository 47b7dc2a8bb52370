/* The DPDK API used by firehose-dpdk; bindgen reads this (see build.rs). */
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_dev.h>
#include <rte_lcore.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_mbuf_pool_ops.h>

/* rte_errno is a per-lcore thread-local macro bindgen cannot bind: read it here. */
int fh_rte_errno(void);
const char *fh_port_bus_name(uint16_t port_id);
struct rte_mempool *fh_pktmbuf_pool_create(const char *name, unsigned int n,
					   unsigned int cache_size, uint16_t data_room_size,
					   int socket_id, unsigned int flags);
