#ifndef HEADWAY_CLIBPQ_SHIM_H
#define HEADWAY_CLIBPQ_SHIM_H

#include <libpq-fe.h>

#endif
