"""lazyattn: the LazyAttention inference engine from Python (README "Python").

    import lazyattn
    llm = lazyattn.LLM()                      # the bundled model, on the CPU, method lazy
    docs = [{"title": "Elkrak Avoltrax", "text": "Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is a cinematographer."}]
    out = llm.chat([{"role": "user", "content": "Where was Elkrak Avoltrax born?"}], documents=docs)
    print(out[0].text, out[0].cached_tokens)

Thin bindings (ctypes) over the C library liblazyattn (include/lazyattn/lazyattn.h).
"""

from . import _capi
from .errors import InvalidArgumentError, InvalidTypeError, LazyattnError, ModelLoadError
from .llm import LLM, RequestOutput, TextStream, default_model_dir
from .request import SamplingParams

__version__ = "0.1.0"  # the C library's LA_VERSION_STRING; checked by tests/python/test_abi.py


def library_version():
    """The loaded C library's version string."""
    return _capi.lib().la_version(None, None, None).decode()


__all__ = ["LLM", "SamplingParams", "RequestOutput", "TextStream", "LazyattnError",
           "InvalidArgumentError", "InvalidTypeError", "ModelLoadError", "default_model_dir",
           "library_version", "__version__"]
