"""What the benchmarks record about the machine (imported by the scripts next to it)."""
import platform


def cpu_name(default: str = "?") -> str:
    """The CPU's model name from /proc/cpuinfo, else platform.processor(), else default."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or default


def isa_flags() -> list:
    """The AVX2 / AVX-512 / AMX flags of /proc/cpuinfo (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return sorted(x for x in flags if x.startswith(("avx512", "amx", "avx2")))
    except OSError:
        pass
    return []
