// Opened from disk (file://), a page may not start a Worker from a file: Material's
// search worker starts from a blob: URL of its source instead (docs/_hooks.py puts
// the source in __mindexpSearchWorker, before this). Served over http: untouched.
(function () {
  if (location.protocol !== "file:" || typeof __mindexpSearchWorker !== "string" ||
      !__mindexpSearchWorker) {
    return;
  }
  var NativeWorker = window.Worker;
  window.Worker = function (url, options) {
    if (/\/workers\/search\.[^/]*\.js$/.test(String(url))) {
      var blob = new Blob([__mindexpSearchWorker], { type: "text/javascript" });
      return new NativeWorker(URL.createObjectURL(blob), options);
    }
    return new NativeWorker(url, options);
  };
})();
